//! Response ids the upstream stores (an endpoint's [`ResponseIds`]: the
//! Responses API's). The client sees one response per request, with round
//! 1's id, while the upstream's conversation went on to the last recall
//! round's response. The store keeps which upstream id a client id stands
//! for (per tenant, written when the answer is complete), and:
//! - a request continuing a client id is sent on from the upstream id,
//!   whatever else it carries, so the model sees the conversation it really
//!   had (and the upstream does not refuse a chain from a response that
//!   ended in a recall call with no output);
//! - a request to a client id's stored response (a fetch, its items, a
//!   cancel, a delete) goes to the upstream id; a fetched response comes
//!   back as the client knows it (its id, the output it was answered, its
//!   echoed tools without the recall tools).

use super::body::{boxed, collect_reserving, full, Collected};
use super::error::ProxyError;
use super::{forward, stream_back, App, BoxBody};
use crate::protocol::endpoint::ResponseIds;
use crate::store::{ResponseId, Tenant};
use bytes::Bytes;
use http::{header, Method, Request, Response};
use hyper::body::Incoming;

/// The largest fetched response patched (larger ones pass as they are).
const MAX_FETCHED_BYTES: u64 = 16 * 1024 * 1024;

/// `body` continuing the upstream id the client's one stands for, if the
/// store says it stands for one, and whether the store knows the id (a
/// response the recall tools were offered with: its request is offered
/// them too). A failed lookup leaves the body as it is.
pub(super) async fn continue_upstream(
    app: &App,
    ids: &ResponseIds,
    tenant: &Tenant,
    body: Bytes,
) -> (Bytes, bool) {
    let Some(client_id) = (ids.continued)(&body) else {
        return (body, false);
    };
    let Some(mapped) = upstream_of(app, tenant, &client_id).await else {
        return (body, false);
    };
    // One round's answer is kept under its own id: nothing to map.
    if mapped.upstream_id == client_id {
        return (body, true);
    }
    let body = std::str::from_utf8(&body)
        .ok()
        .and_then(|text| (ids.continue_from)(text, &mapped.upstream_id))
        .map_or(body, Bytes::from);
    (body, true)
}

/// What the store says a client id stands for; a failed lookup is counted,
/// logged and taken as none.
async fn upstream_of(app: &App, tenant: &Tenant, client_id: &str) -> Option<ResponseId> {
    match app.store.response_id(tenant, client_id).await {
        Ok(mapped) => mapped,
        Err(e) => {
            app.metrics.store_error("response_id");
            tracing::warn!(error = %e, "looking up a response id failed");
            None
        }
    }
}

/// A request to one stored response.
pub(super) async fn stored(
    app: &App,
    ids: &ResponseIds,
    tenant: Tenant,
    req: Request<Incoming>,
) -> Result<Response<BoxBody>, ProxyError> {
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let Some(client_id) = (ids.in_path)(&path).map(str::to_string) else {
        return forward(app, &parts, boxed(body), None).await;
    };
    // The items a response was given are asked of round 1, the id the
    // client holds (its own input, as rewritten): a later round's input
    // holds the hidden recall calls and what they read.
    if path.ends_with("/input_items") {
        return forward(app, &parts, boxed(body), None).await;
    }
    let Some(mapped) = upstream_of(app, &tenant, &client_id).await else {
        return forward(app, &parts, boxed(body), None).await;
    };
    // One round's answer, kept under its own id: the upstream's is what
    // the client saw.
    if mapped.upstream_id == client_id {
        return forward(app, &parts, boxed(body), None).await;
    }
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or(path.clone(), |pq| pq.as_str().to_string())
        .replacen(
            &format!("/{client_id}"),
            &format!("/{}", mapped.upstream_id),
            1,
        );
    parts.uri = path_and_query
        .parse()
        .map_err(|e| ProxyError::BadRequest(format!("cannot map the response id: {e}")))?;
    let fetch = parts.method == Method::GET && path.ends_with(&client_id);
    if !fetch {
        return forward(app, &parts, boxed(body), None).await;
    }
    // Read to patch its ids: asked for uncompressed, and decoded if it
    // comes compressed all the same (the SDKs accept gzip).
    let mut request = super::upstream_request(app, &parts, boxed(body), None)?;
    request.headers_mut().insert(
        header::ACCEPT_ENCODING,
        header::HeaderValue::from_static("identity"),
    );
    let response = app.send(request).await?;
    if !response.status().is_success() {
        return Ok(stream_back(response));
    }
    // A coding the proxy cannot decode goes back as it came, unpatched.
    if super::decode::is_encoded(response.headers())
        && !super::decode::can_decode(response.headers())
    {
        return Ok(stream_back(response));
    }
    let response = super::decode::decoded(response).map_err(|coding| {
        ProxyError::UpstreamEncoding(format!("cannot decode a stored response: {coding}"))
    })?;
    let (mut head, body) = response.into_parts();
    super::upstream::strip_hop_by_hop(&mut head.headers);
    // Read whole to patch its ids, so counted against the bytes the proxy
    // holds at once (the answer echoes the request's instructions and
    // tools: its size is the client's to choose).
    let mut held = app.limits.buffer();
    let read = collect_reserving(body, MAX_FETCHED_BYTES, |total| held.grow_to(total))
        .await
        .map_err(|e| ProxyError::UpstreamUnreachable(format!("reading the response: {e}")))?;
    let bytes = match read {
        Ok(Collected::Complete(bytes)) => bytes,
        Ok(Collected::TooLarge(rest)) => return Ok(Response::from_parts(head, boxed(rest))),
        Err(_unread) => return Err(super::limits::over_buffered(app)),
    };
    let patched = std::str::from_utf8(&bytes).ok().and_then(|text| {
        let names = &app.config.policy.recall_names;
        (ids.as_the_client_saw)(text, &client_id, &mapped.output, names)
    });
    let out = match patched {
        Some(text) => {
            head.headers.remove(header::CONTENT_LENGTH);
            Bytes::from(text)
        }
        None => bytes,
    };
    Ok(Response::from_parts(head, full(out)))
}
