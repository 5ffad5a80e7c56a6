//! Driving recall rounds (SPEC section 6): the proxy answers the model's
//! recall calls itself and asks the upstream again, so the client sees one
//! ordinary response.
//!
//! Non-streaming: each round's response is read whole; recall calls are run
//! against the store; the assistant message (recall calls only) and the
//! results are appended to the conversation; at most `recall.max_rounds`
//! rounds, then one last request without the recall tools. Streaming: a task
//! feeds each round's events through the [`Splicer`] into a bounded channel
//! that is the client's response body; a dropped client ends the task, which
//! drops (cancels) the upstream request.

use super::body::{collect_within, full, BoxBody, ChannelBody, Collected};
use super::error::ProxyError;
use super::{stream_back, upstream_request, App};
use crate::recall::openai::{
    append_messages, assistant_message, recall_calls, strip_recall_calls, tool_message, Usage,
};
use crate::recall::sse::SseParser;
use crate::recall::stream::{RoundEnd, Splicer};
use crate::recall::{execute, RecallCall, RecallScope};
use crate::rewrite::{rewrite_with, Mode, Outcome, Policy};
use crate::store::Tenant;
use crate::stub::RecallToolNames;
use bytes::Bytes;
use http::{header, HeaderValue, Response};
use http_body::Frame;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;
use std::sync::Arc;

/// The largest upstream response read whole in a non-streaming round.
const MAX_RESPONSE_BYTES: u64 = 64 * 1024 * 1024;
/// The largest single server-sent event.
const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;
/// Frames buffered between the recall driver and a slow client.
const CHANNEL_FRAMES: usize = 16;

/// One chat completion that carries stubs and offers the recall tools.
pub(super) struct RecallRequest {
    pub parts: http::request::Parts,
    pub tenant: Tenant,
    pub session: String,
    pub names: RecallToolNames,
    /// The rewritten body, recall tools included.
    pub body: Bytes,
    /// The client's body, to derive the last round's body without recall tools.
    pub original: Bytes,
    /// Response headers to add (`x-toolstub-*`).
    pub extra_headers: Vec<(&'static str, HeaderValue)>,
}

impl RecallRequest {
    /// The body of the next round: the base (with or without the recall
    /// tools) plus the messages appended so far.
    fn round_body(
        &self,
        app: &App,
        appended: &[Value],
        offered: bool,
    ) -> Result<Bytes, ProxyError> {
        let base = if offered {
            String::from_utf8_lossy(&self.body).into_owned()
        } else {
            let policy = Policy {
                recall_enabled: false,
                ..app.config.policy.clone()
            };
            match rewrite_with(
                &self.original,
                &policy,
                &app.protocol,
                Mode::WithRefs,
                &app.memo,
            ) {
                Outcome::Rewritten(r) => r.body,
                Outcome::Unchanged(_) => String::from_utf8_lossy(&self.original).into_owned(),
            }
        };
        if appended.is_empty() {
            return Ok(Bytes::from(base));
        }
        append_messages(&base, appended)
            .map(Bytes::from)
            .ok_or_else(|| ProxyError::Internal("cannot append recall messages".to_string()))
    }

    async fn send(&self, app: &App, body: Bytes) -> Result<Response<Incoming>, ProxyError> {
        let length = body.len();
        let request = upstream_request(app, &self.parts, full(body), Some(length))?;
        let (response, latency) = app.upstream.send(request).await?;
        app.metrics.upstream_latency(latency);
        Ok(response)
    }

    /// Runs the recall calls of one round; returns the messages to append.
    async fn run_calls(
        &self,
        app: &App,
        content: Option<&str>,
        calls: &[RecallCall],
    ) -> Vec<Value> {
        let scope = RecallScope {
            store: &app.store,
            tenant: &self.tenant,
            session: &self.session,
        };
        let mut messages = vec![assistant_message(content, calls)];
        for call in calls {
            app.metrics.recall_call(call.tool.label());
            let (result, failed) = execute(&scope, call).await;
            if failed {
                app.metrics.recall_error(call.tool.label());
            }
            messages.push(tool_message(&call.id, &result));
        }
        messages
    }

    fn decorate(&self, response: &mut Response<BoxBody>) {
        for (name, value) in &self.extra_headers {
            response.headers_mut().insert(*name, value.clone());
        }
    }
}

/// The non-streaming loop.
pub(super) async fn non_streaming(
    app: &Arc<App>,
    req: RecallRequest,
) -> Result<Response<BoxBody>, ProxyError> {
    let mut appended: Vec<Value> = Vec::new();
    let mut usage = Usage::default();
    let mut rounds = 0usize;
    loop {
        let offered = rounds < app.config.recall_max_rounds;
        let body = req.round_body(app, &appended, offered)?;
        let response = req.send(app, body).await?;
        if !response.status().is_success() {
            app.metrics.recall_rounds(rounds);
            let mut response = stream_back(response);
            req.decorate(&mut response);
            return Ok(response);
        }
        let (mut head, body) = response.into_parts();
        super::upstream::strip_hop_by_hop(&mut head.headers);
        head.headers.remove(header::CONTENT_LENGTH);
        let bytes = match collect_within(body, MAX_RESPONSE_BYTES)
            .await
            .map_err(|e| ProxyError::UpstreamUnreachable(format!("reading the response: {e}")))?
        {
            Collected::Complete(bytes) => bytes,
            Collected::TooLarge(_) => {
                return Err(ProxyError::Internal(
                    "the upstream response is too large to inspect for recall calls".to_string(),
                ))
            }
        };
        let parsed = serde_json::from_slice::<Value>(&bytes).ok();
        let Some(mut value) = parsed else {
            app.metrics.recall_rounds(rounds);
            let mut response = Response::from_parts(head, full(bytes));
            req.decorate(&mut response);
            return Ok(response);
        };
        usage.add(value.get("usage"));
        let calls = if offered {
            recall_calls(&value, &req.names)
        } else {
            Vec::new()
        };
        if calls.is_empty() {
            app.metrics.recall_rounds(rounds);
            let body = if rounds == 0 && !mentions_recall(&value, &req.names) {
                bytes // nothing to hide: the upstream's bytes as they are
            } else {
                strip_recall_calls(&mut value, &req.names);
                if usage.seen {
                    if let Some(u) = value.get_mut("usage") {
                        usage.apply(u);
                    }
                }
                Bytes::from(value.to_string())
            };
            let mut response = Response::from_parts(head, full(body));
            req.decorate(&mut response);
            return Ok(response);
        }
        rounds += 1;
        let content = value
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .map(str::to_string);
        appended.extend(req.run_calls(app, content.as_deref(), &calls).await);
    }
}

/// Whether a response names a recall tool anywhere in its tool calls.
fn mentions_recall(value: &Value, names: &RecallToolNames) -> bool {
    let mut copy = value.clone();
    strip_recall_calls(&mut copy, names);
    copy != *value
}

/// The streaming loop: the first round's head goes to the client at once;
/// the body is spliced from every round by a driver task.
pub(super) async fn streaming(
    app: &Arc<App>,
    req: RecallRequest,
) -> Result<Response<BoxBody>, ProxyError> {
    let first_body = req.round_body(app, &[], app.config.recall_max_rounds > 0)?;
    let response = req.send(app, first_body).await?;
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
    let names = req.names.clone();
    let extra = req.extra_headers.clone();
    tokio::spawn(async move {
        drive(&app, &req, upstream_body, Splicer::new(names), tx).await;
    });
    let mut response = Response::from_parts(head, ChannelBody(rx).boxed());
    for (name, value) in extra {
        response.headers_mut().insert(name, value);
    }
    Ok(response)
}

type Sender = tokio::sync::mpsc::Sender<Result<Frame<Bytes>, super::body::BoxError>>;

/// Sends bytes to the client; `false` when the client is gone.
async fn send_all(tx: &Sender, chunks: Vec<Bytes>) -> bool {
    for chunk in chunks {
        if tx.send(Ok(Frame::data(chunk))).await.is_err() {
            return false;
        }
    }
    true
}

async fn drive(
    app: &App,
    req: &RecallRequest,
    mut body: Incoming,
    mut splicer: Splicer,
    tx: Sender,
) {
    let mut appended: Vec<Value> = Vec::new();
    let mut rounds = 0usize;
    loop {
        let mut parser = SseParser::new(MAX_EVENT_BYTES);
        while let Some(frame) = body.frame().await {
            let data = match frame {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => data,
                    Err(_) => continue,
                },
                Err(e) => {
                    let message = format!("the upstream stream failed: {e}");
                    let _ = send_all(
                        &tx,
                        vec![Splicer::error_event(&message, "upstream_stream_failed")],
                    )
                    .await;
                    app.metrics.recall_rounds(rounds);
                    return;
                }
            };
            let events = match parser.push(&data) {
                Ok(events) => events,
                Err(e) => {
                    let _ = send_all(
                        &tx,
                        vec![Splicer::error_event(
                            &e.to_string(),
                            "upstream_stream_invalid",
                        )],
                    )
                    .await;
                    return;
                }
            };
            for event in &events {
                if !send_all(&tx, splicer.event(event)).await {
                    return; // the client is gone: dropping `body` cancels the upstream
                }
            }
        }
        if let Some(event) = parser.finish() {
            if !send_all(&tx, splicer.event(&event)).await {
                return;
            }
        }
        match splicer.end_round() {
            RoundEnd::Done => {
                app.metrics.recall_rounds(rounds);
                let _ = send_all(&tx, splicer.finish()).await;
                return;
            }
            RoundEnd::UpstreamError => {
                app.metrics.recall_rounds(rounds);
                return;
            }
            RoundEnd::Truncated => {
                app.metrics.recall_rounds(rounds);
                let message = "the upstream stream ended before [DONE]";
                let _ = send_all(
                    &tx,
                    vec![Splicer::error_event(message, "upstream_stream_truncated")],
                )
                .await;
                return;
            }
            RoundEnd::Recall { content, calls } => {
                rounds += 1;
                appended.extend(req.run_calls(app, content.as_deref(), &calls).await);
                let offered = rounds < app.config.recall_max_rounds;
                let next = match req.round_body(app, &appended, offered) {
                    Ok(next) => next,
                    Err(e) => {
                        let _ = send_all(&tx, vec![Splicer::error_event(&e.to_string(), e.code())])
                            .await;
                        return;
                    }
                };
                let response = match req.send(app, next).await {
                    Ok(response) => response,
                    Err(e) => {
                        let _ = send_all(&tx, vec![Splicer::error_event(&e.to_string(), e.code())])
                            .await;
                        return;
                    }
                };
                if !response.status().is_success() {
                    let status = response.status().as_u16();
                    let detail = response
                        .into_body()
                        .collect()
                        .await
                        .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
                        .unwrap_or_default();
                    let message = format!(
                        "the upstream answered {status} during a recall round: {}",
                        crate::synopsis::clip(&detail, 500)
                    );
                    let _ =
                        send_all(&tx, vec![Splicer::error_event(&message, "upstream_error")]).await;
                    return;
                }
                splicer.next_round(offered);
                body = response.into_body();
            }
        }
    }
}
