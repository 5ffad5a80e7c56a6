//! The Responses API's ids: the client sees one response per request, with
//! round 1's id, while the upstream's conversation went on to the last
//! recall round's response. The store keeps which upstream id a client id
//! stands for (per tenant, written when the answer is complete), and:
//! - a request chaining from a client id (`previous_response_id`) is sent
//!   on from the upstream id, whatever else it carries, so the model sees
//!   the conversation it really had (and the upstream does not refuse a
//!   chain from a response that ended in a recall call with no output);
//! - `GET /v1/responses/{id}` (and its `input_items`, `cancel`, `DELETE`)
//!   of a client id goes to the upstream id; a fetched response comes back
//!   with the client id, the output the client saw, and its echoed tools
//!   without the recall tools.

use super::body::{boxed, collect_reserving, full, Collected};
use super::error::ProxyError;
use super::{forward, stream_back, App, BoxBody};
use crate::protocol::json_edit::{raw_member, set_members};
use crate::protocol::json_string;
use crate::recall::RecallTool;
use crate::store::Tenant;
use bytes::Bytes;
use http::{header, Method, Request, Response};
use hyper::body::Incoming;

/// The largest fetched response patched (larger ones pass as they are).
const MAX_FETCHED_BYTES: u64 = 16 * 1024 * 1024;

/// Whether a path is one response's: `.../v1/responses/{id}[/...]`.
pub(super) fn response_id_in(path: &str) -> Option<&str> {
    let (_, rest) = path.split_once("/v1/responses/")?;
    let id = rest.split('/').next()?;
    id.starts_with("resp").then_some(id)
}

/// `body` with its `previous_response_id` replaced by the upstream id the
/// client's one stands for, if the store says it stands for one. A failed
/// lookup leaves the body as it is.
pub(super) async fn chain_from_upstream(app: &App, tenant: &Tenant, body: Bytes) -> Bytes {
    // Most bodies do not chain (Codex never does): settled without a scan.
    if memchr::memmem::find(&body, b"\"previous_response_id\"").is_none() {
        return body;
    }
    let Some(text) = std::str::from_utf8(&body).ok() else {
        return body;
    };
    let Some(client_id) = raw_member(text, "previous_response_id")
        .and_then(|raw| serde_json::from_str::<String>(raw).ok())
    else {
        return body;
    };
    match app.store.response_id(tenant, &client_id).await {
        Ok(Some(id)) => set_members(
            text,
            &[("previous_response_id", json_string(&id.upstream_id))],
        )
        .map_or(body, Bytes::from),
        Ok(None) => body,
        Err(e) => {
            app.metrics.store_error("response_id");
            tracing::warn!(error = %e, "looking up a response id failed");
            body
        }
    }
}

/// A request for one response by id.
pub(super) async fn by_id(
    app: &App,
    tenant: Tenant,
    req: Request<Incoming>,
) -> Result<Response<BoxBody>, ProxyError> {
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let Some(client_id) = response_id_in(&path).map(str::to_string) else {
        return forward(app, &parts, boxed(body), None).await;
    };
    let mapped = match app.store.response_id(&tenant, &client_id).await {
        Ok(mapped) => mapped,
        Err(e) => {
            app.metrics.store_error("response_id");
            tracing::warn!(error = %e, "looking up a response id failed");
            None
        }
    };
    let Some(mapped) = mapped else {
        return forward(app, &parts, boxed(body), None).await;
    };
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
    let request = super::upstream_request(app, &parts, boxed(body), None)?;
    let response = app.send(request).await?;
    if !response.status().is_success() {
        return Ok(stream_back(response));
    }
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
    let patched = std::str::from_utf8(&bytes)
        .ok()
        .and_then(|text| patch_fetched(app, text, &client_id, &mapped.output));
    let out = match patched {
        Some(text) => {
            head.headers.remove(header::CONTENT_LENGTH);
            Bytes::from(text)
        }
        None => bytes,
    };
    Ok(Response::from_parts(head, full(out)))
}

/// A fetched response as the client knows it.
fn patch_fetched(app: &App, text: &str, client_id: &str, output: &str) -> Option<String> {
    let mut members = vec![
        ("id", json_string(client_id)),
        ("output", output.to_string()),
    ];
    let names = &app.config.policy.recall_names;
    if let Some(tools) = raw_member(text, "tools") {
        let tools: Vec<String> = serde_json::from_str::<Vec<serde_json::Value>>(tools)
            .ok()?
            .into_iter()
            .filter(|t| {
                let name = t
                    .get("name")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("");
                let own = name.strip_prefix("toolstub_").unwrap_or(name);
                let own = own
                    .rsplit_once('_')
                    .filter(|(_, n)| n.parse::<u32>().is_ok())
                    .map_or(own, |(base, _)| base);
                RecallTool::named(names, own).is_none()
            })
            .map(|t| t.to_string())
            .collect();
        members.push(("tools", format!("[{}]", tools.join(","))));
    }
    set_members(text, &members)
}
