//! The mock's Gemini API upstream (`POST .../models/{m}:generateContent`
//! and `:streamGenerateContent?alt=sse`), for the load benchmark: a small
//! `GenerateContentResponse`; streamed, one response per event
//! (`data: <json>\r\n\r\n`, each carrying only its new parts, the
//! cumulative `usageMetadata`, `modelVersion` and `responseId`, the last
//! with `finishReason`), all at once or paced and stamped; a recall round
//! on [`RECALL_MARKER`] and its answer.

use super::{
    contains, gap_of, json_response, paced_sse, pieces, refs_in, sse_response, MockBody,
    RECALL_MARKER, STAMP,
};
use http_body_util::{BodyExt, Full};

/// A small response, as `:generateContent` answers.
pub const RESPONSE: &str = r#"{"candidates":[{"content":{"parts":[{"text":"Done."}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":2,"totalTokenCount":7},"modelVersion":"gemini-mock","responseId":"bench"}"#;

/// Text events of the mock's paced answer (the last with `finishReason`):
/// 20, as the other APIs' paced streams have.
pub const TEXT_EVENTS: usize = 20;
/// Text events of a stream sent all at once (the passthrough rows), as
/// many as the chat mock's chunks.
pub const BURST_EVENTS: usize = 10;
/// Text events of the recall round's first round, before its call.
pub const RECALL_TEXT_EVENTS: usize = 5;
/// The `thoughtSignature` on the mock's recall call, which the second
/// round must carry back (Gemini 3 refuses a call that lost it).
pub const SIGNATURE: &str = "YmVuY2gtcmVjYWxsLXNpZ25hdHVyZQ==";

/// The `functionCall` part of the mock's recall call on `reference`, as
/// the first round streams it (no `id`: the Gemini API sends none).
pub fn recall_call_part(reference: &str) -> String {
    format!(
        r#"{{"functionCall":{{"name":"tool_result_read","args":{{"ref":"{reference}","offset":0,"limit":2000}}}},"thoughtSignature":"{SIGNATURE}"}}"#
    )
}

/// The events of one streamed answer: one per part (raw JSON), the last
/// with `finishReason`; `stamped`: each response ends with `"bench_ns":`
/// [`STAMP`].
pub fn events(parts: &[String], stamped: bool) -> Vec<String> {
    let stamp = if stamped {
        format!(r#","bench_ns":{STAMP}"#)
    } else {
        String::new()
    };
    let id = next_response_id();
    parts
        .iter()
        .enumerate()
        .map(|(i, part)| {
            let tokens = i + 1;
            let finish = if tokens == parts.len() {
                r#","finishReason":"STOP""#
            } else {
                ""
            };
            format!(
                "data: {{\"candidates\":[{{\"content\":{{\"parts\":[{part}],\"role\":\"model\"}}{finish},\"index\":0}}],\"usageMetadata\":{{\"promptTokenCount\":25,\"candidatesTokenCount\":{tokens},\"totalTokenCount\":{}}},\"modelVersion\":\"gemini-mock\",\"responseId\":\"{id}\"{stamp}}}\r\n\r\n",
                25 + tokens
            )
        })
        .collect()
}

/// Text parts, one per piece.
pub fn text_parts(n: usize) -> Vec<String> {
    pieces(n)
        .into_iter()
        .map(|p| format!(r#"{{"text":"{p}"}}"#))
        .collect()
}

/// A fresh `responseId` per streamed answer.
fn next_response_id() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    format!(
        "bench_{:06}",
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// Whether a request's last content answers a `tool_result_read` call
/// (the second round of a recall exchange).
fn answers_recall(body: &[u8]) -> bool {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return false;
    };
    value["contents"]
        .as_array()
        .and_then(|contents| contents.last())
        .and_then(|last| last["parts"].as_array())
        .is_some_and(|parts| {
            parts
                .iter()
                .any(|p| p.pointer("/functionResponse/name") == Some(&"tool_result_read".into()))
        })
}

/// The mock's Gemini upstream: the small response; streamed
/// (`:streamGenerateContent`), [`BURST_EVENTS`] text events at once, or
/// [`TEXT_EVENTS`] paced and stamped when the request carries
/// [`super::GAP_HEADER`]; on [`RECALL_MARKER`], a first round of text and
/// a `tool_result_read` call on the request's first stub ref, and the
/// answer once the request's last content answers it (refused, 400, when
/// the call came back without its signature).
pub fn answer(parts: &http::request::Parts, body: &bytes::Bytes) -> http::Response<MockBody> {
    if !parts.uri.path().ends_with(":streamGenerateContent") {
        return json_response(RESPONSE).map(BodyExt::boxed);
    }
    let gap = gap_of(parts);
    let recall = contains(body, RECALL_MARKER);
    let answered = recall && answers_recall(body);
    if answered && !contains(body, SIGNATURE) {
        return http::Response::builder()
            .status(400)
            .header("content-type", "application/json")
            .body(Full::new(bytes::Bytes::from_static(
                br#"{"error":{"code":400,"message":"Function call is missing a thought_signature","status":"INVALID_ARGUMENT"}}"#,
            )))
            .expect("response")
            .map(BodyExt::boxed);
    }
    let parts = if recall && !answered {
        let reference = refs_in(body)
            .into_iter()
            .next()
            .unwrap_or_else(|| "tr_none".to_string());
        let mut parts = text_parts(RECALL_TEXT_EVENTS);
        parts.push(recall_call_part(&reference));
        parts
    } else if gap.is_some() || recall {
        text_parts(TEXT_EVENTS)
    } else {
        text_parts(BURST_EVENTS)
    };
    let events = events(&parts, gap.is_some());
    match gap {
        Some(gap) => paced_sse(events, gap),
        None => sse_response(events.concat()).map(BodyExt::boxed),
    }
}
