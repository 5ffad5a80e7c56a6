//! Claude on Amazon Bedrock: Anthropic Messages under a model resource
//! (`POST .../model/{modelId}/invoke` and `/invoke-with-response-stream`),
//! the body without `model` and with `anthropic_version:
//! "bedrock-2023-05-31"`, whole or streamed as the path says (not the body),
//! the stream in Bedrock's binary frames ([`eventstream`]). The Anthropic
//! adapter reads and rewrites it; the endpoints say which route streams
//! ([`Endpoint::streams`]). A body that is not Anthropic's (another model
//! family) does not parse, so it goes upstream unchanged.

pub mod eventstream;

use super::anthropic::AnthropicMessages;
use super::endpoint::{AwsService, Endpoint, Envelope, Purpose};
use super::framing::Framing;

/// `POST .../model/{id}/invoke`.
pub static INVOKE: Endpoint = Endpoint {
    model_in_path: |path| model_in(path, "invoke"),
    streams: Some(false),
    aws: Some(&AWS),
    ..Endpoint::turn("bedrock_invoke", &AnthropicMessages, |path| {
        model_segment(path, "invoke").is_some()
    })
};

/// `POST .../model/{id}/invoke-with-response-stream`: the stream in
/// Bedrock's binary frames.
pub static INVOKE_STREAM: Endpoint = Endpoint {
    model_in_path: |path| model_in(path, "invoke-with-response-stream"),
    streams: Some(true),
    framing: Framing::EventStream,
    aws: Some(&AWS),
    ..Endpoint::turn("bedrock_invoke_stream", &AnthropicMessages, |path| {
        model_segment(path, "invoke-with-response-stream").is_some()
    })
};

/// `POST .../model/{id}/count-tokens`, whose body wraps an invoke body in
/// base64 (`{"input": {"invokeModel": {"body": "..."}}}`).
pub static COUNT_TOKENS: Endpoint = Endpoint {
    purpose: Purpose::CountTokens,
    model_in_path: |path| model_in(path, "count-tokens"),
    aws: Some(&AWS),
    envelope: Some(Envelope {
        inner: &INVOKE,
        open: count_tokens_inner,
        close: count_tokens_wrap,
    }),
    ..Endpoint::turn("bedrock_count_tokens", &AnthropicMessages, |path| {
        model_segment(path, "count-tokens").is_some()
    })
};

/// The model id of `.../model/{id}/{operation}`, as the path spells it.
fn model_segment<'p>(path: &'p str, operation: &str) -> Option<&'p str> {
    let rest = path.strip_suffix(operation)?.strip_suffix('/')?;
    let (_, model) = rest.rsplit_once("/model/")?;
    (!model.is_empty() && !model.contains('/')).then_some(model)
}

/// The model id of `.../model/{id}/{operation}`, percent-decoded
/// (`us.anthropic.claude-sonnet-4-5-20250929-v1%3A0` is
/// `us.anthropic.claude-sonnet-4-5-20250929-v1:0`).
fn model_in(path: &str, operation: &str) -> Option<String> {
    crate::percent::decode(model_segment(path, operation)?, false)
}

/// Whether `path` is an operation on a Bedrock runtime model
/// (`.../model/{id}/invoke`, `/invoke-with-response-stream`, `/converse`,
/// `/converse-stream`, `/count-tokens`, `/apply-guardrail`...): with no
/// single upstream it goes to Bedrock's runtime, rewritten or not.
pub fn is_runtime_path(path: &str) -> bool {
    let Some((rest, op)) = path.rsplit_once('/') else {
        return false;
    };
    let Some((_, model)) = rest.rsplit_once("/model/") else {
        return false;
    };
    !model.is_empty()
        && !model.contains('/')
        && matches!(
            op,
            "invoke"
                | "invoke-with-response-stream"
                | "converse"
                | "converse-stream"
                | "count-tokens"
        )
}

/// The invoke body a CountTokens body wraps.
fn count_tokens_inner(body: &[u8]) -> Option<Vec<u8>> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let encoded = value.pointer("/input/invokeModel/body")?.as_str()?;
    aws_smithy_types::base64::decode(encoded).ok()
}

/// `body` (a CountTokens body) with its wrapped invoke body replaced by
/// `inner`, every other member kept.
fn count_tokens_wrap(body: &[u8], inner: &[u8]) -> Option<Vec<u8>> {
    let mut value: serde_json::Value = serde_json::from_slice(body).ok()?;
    *value.pointer_mut("/input/invokeModel/body")? =
        serde_json::Value::String(aws_smithy_types::base64::encode(inner));
    serde_json::to_vec(&value).ok()
}

/// Bedrock's runtime, as AWS signs for it.
pub static AWS: AwsService = AwsService {
    name: "bedrock",
    region_of_host,
};

/// The region of a Bedrock runtime host
/// (`bedrock-runtime.{region}.amazonaws.com`, `-fips` too).
pub fn region_of_host(host: &str) -> Option<&str> {
    let rest = host
        .strip_prefix("bedrock-runtime.")
        .or_else(|| host.strip_prefix("bedrock-runtime-fips."))?;
    let (region, domain) = rest.split_once('.')?;
    (domain.starts_with("amazonaws.") && !region.is_empty()).then_some(region)
}

/// The runtime host of a region.
fn runtime_host(region: &str) -> String {
    format!("bedrock-runtime.{region}.amazonaws.com")
}

/// Whether `path` is one of Bedrock's control-plane listings that Claude
/// Code asks its Bedrock base URL for (`GET /inference-profiles`, which it
/// makes at start, and `/foundation-models`), each served by
/// `bedrock.{region}.amazonaws.com`.
pub fn is_control_path(path: &str) -> bool {
    ["/inference-profiles", "/foundation-models"]
        .iter()
        .any(|p| {
            path.strip_prefix(p)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
}

/// Where a Bedrock path goes when no single upstream is set: a runtime
/// path to the runtime host of the proxy's AWS region, a control-plane
/// listing to its control-plane host; `Err` (what to set) when no region
/// is known, rather than another provider's host. `None` for any other
/// path.
pub fn host_of_path(path: &str, aws_region: Option<&str>) -> Option<Result<String, &'static str>> {
    let host: fn(&str) -> String = if is_runtime_path(path) {
        runtime_host
    } else if is_control_path(path) {
        |region| format!("bedrock.{region}.amazonaws.com")
    } else {
        return None;
    };
    Some(aws_region.map(host).ok_or(
        "a Bedrock request needs an upstream: set AWS_REGION, or --upstream https://bedrock-runtime.REGION.amazonaws.com",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invoke_paths_and_their_models() {
        let stream =
            "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream";
        assert!((INVOKE_STREAM.serves)(stream) && !(INVOKE.serves)(stream));
        assert!((INVOKE.serves)(
            "/bedrock/model/anthropic.claude-3-haiku/invoke"
        ));
        for path in ["/model//invoke", "/v1/messages", "/model/a/b/invoke"] {
            assert!(
                !(INVOKE.serves)(path) && !(INVOKE_STREAM.serves)(path),
                "{path}"
            );
        }
        assert_eq!(
            INVOKE_STREAM.model_in(stream).as_deref(),
            Some("us.anthropic.claude-sonnet-4-5-20250929-v1:0")
        );
        assert_eq!(
            region_of_host("bedrock-runtime.eu-west-1.amazonaws.com"),
            Some("eu-west-1")
        );
        assert_eq!(
            region_of_host("bedrock-runtime-fips.us-east-1.amazonaws.com"),
            Some("us-east-1")
        );
        assert_eq!(region_of_host("127.0.0.1"), None);
        assert_eq!(
            host_of_path("/model/m/converse", Some("us-west-2")),
            Some(Ok("bedrock-runtime.us-west-2.amazonaws.com".to_string()))
        );
        assert!(matches!(
            host_of_path("/model/m/invoke", None),
            Some(Err(_))
        ));
        assert_eq!(host_of_path("/v1/messages", Some("us-west-2")), None);
        // Claude Code's listing at start goes to the control plane.
        assert_eq!(
            host_of_path("/inference-profiles", Some("us-west-2")),
            Some(Ok("bedrock.us-west-2.amazonaws.com".to_string()))
        );
        assert!(is_control_path("/foundation-models/anthropic.claude-x"));
        assert!(!is_control_path("/inference-profilesx"));
    }

    #[test]
    fn count_tokens_wraps_an_invoke_body() {
        assert!((COUNT_TOKENS.serves)(
            "/model/anthropic.claude-x/count-tokens"
        ));
        assert!(!(COUNT_TOKENS.serves)("/model//count-tokens"));
        assert!(is_runtime_path("/model/m/converse-stream") && is_runtime_path("/model/m/invoke"));
        assert!(!is_runtime_path("/model/m/other") && !is_runtime_path("/v1/messages"));
        let inner = br#"{"anthropic_version":"bedrock-2023-05-31","messages":[]}"#;
        let outer = format!(
            r#"{{"input":{{"invokeModel":{{"body":"{}"}}}},"x":1}}"#,
            aws_smithy_types::base64::encode(inner)
        );
        assert_eq!(
            count_tokens_inner(outer.as_bytes()).as_deref(),
            Some(&inner[..])
        );
        let wrapped = count_tokens_wrap(outer.as_bytes(), b"{}").expect("wrapped");
        let v: serde_json::Value = serde_json::from_slice(&wrapped).expect("json");
        assert_eq!(v["x"], 1);
        assert_eq!(count_tokens_inner(&wrapped).as_deref(), Some(&b"{}"[..]));
        assert_eq!(count_tokens_inner(b"{\"input\":{}}"), None);
    }

    #[test]
    fn the_stream_route_streams_whatever_the_body_says() {
        use crate::rewrite::memo::Memo;
        use crate::rewrite::{rewrite_reading_for, Mode, Outcome, Policy, RequestFacts};
        let output = "line of a long tool output\n".repeat(2_000);
        let body = serde_json::json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 10,
            "stream": false, "tools": [{"name": "Read", "input_schema": {}}],
            "messages": [{"role": "user", "content": "go"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": output}]}]})
        .to_string();
        for (endpoint, streams) in [(&INVOKE, false), (&INVOKE_STREAM, true)] {
            let facts = RequestFacts {
                path_streams: endpoint.streams,
                ..RequestFacts::default()
            };
            let memo = Memo::new(0);
            let (outcome, _) = rewrite_reading_for(
                body.as_bytes(),
                &Policy::default(),
                endpoint.protocol,
                Mode::WithRefs,
                &memo,
                facts,
            );
            match outcome {
                Outcome::Rewritten(r) => assert_eq!(r.streaming, streams, "{endpoint:?}"),
                Outcome::Unchanged(why) => panic!("{endpoint:?}: {why:?}"),
            }
        }
        // Another model family's body is no Anthropic request.
        assert!(INVOKE.protocol.parse(r#"{"inputText":"hi"}"#).is_none());
    }
}
