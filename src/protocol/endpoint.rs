//! The routes the proxy rewrites, each an [`Endpoint`] its protocol
//! declares in its own folder: which paths it serves, what a request to it
//! is, the model its path names, how its streamed responses are framed and
//! what the proxy does before the rewrite (check an AWS signature, resolve
//! a stored response chain, open an envelope), and how its upstream's
//! stored responses are named. [`ENDPOINTS`] (with
//! [`host_named_by`], where a cloud's path goes) is the one list that names
//! every protocol; the proxy routes through [`route`] and names none. A
//! new protocol is its folder, one line here and its tests.

use super::framing::Framing;
use super::{anthropic, bedrock, gemini, openai_chat, responses, vertex, Flavor, Protocol};
use crate::stub::RecallToolNames;

/// Every endpoint, in the order [`route`] tries them (none serves a path
/// another serves: `each_path_has_one_endpoint` checks).
pub static ENDPOINTS: &[&Endpoint] = &[
    &openai_chat::CHAT_COMPLETIONS,
    &anthropic::MESSAGES,
    &anthropic::COUNT_TOKENS,
    &responses::RESPONSES,
    &bedrock::INVOKE,
    &bedrock::INVOKE_STREAM,
    &bedrock::COUNT_TOKENS,
    &gemini::GENERATE_CONTENT,
    &gemini::STREAM_GENERATE_CONTENT,
    &gemini::COUNT_TOKENS,
];

/// The endpoint a `POST` to `path` is for, if any.
pub fn route(path: &str) -> Option<&'static Endpoint> {
    ENDPOINTS.iter().copied().find(|e| (e.serves)(path))
}

/// The error format of a request to no endpoint (passed through, or
/// failing before it is routed), which also names the provider it goes to
/// when no single upstream is set: Google's on a Gemini API path or with an
/// `x-goog-api-key` header, Anthropic's when the client speaks it (an
/// `anthropic-version` header), else OpenAI's.
pub fn flavor_elsewhere(path: &str, headers: &http::HeaderMap) -> Flavor {
    if gemini::is_path(path) || headers.contains_key("x-goog-api-key") {
        Flavor::Google
    } else if headers.contains_key("anthropic-version") {
        Flavor::Anthropic
    } else {
        Flavor::OpenAi
    }
}

/// The host a path names itself, where the proxy has no single upstream
/// (each provider at its own base URL): a Bedrock runtime path goes to the
/// runtime host of the proxy's AWS region (`Err`: what to set, when none
/// is known), a Vertex AI path to the host of the location it names,
/// rewritten or not. `None`: the path names no host.
pub fn host_named_by(path: &str, aws_region: Option<&str>) -> Option<Result<String, &'static str>> {
    bedrock::host_of_path(path, aws_region).or_else(|| vertex::host_of_path(path).map(Ok))
}

/// An AWS service whose requests carry a SigV4 signature over their body.
pub struct AwsService {
    /// Its signing name (`bedrock`).
    pub name: &'static str,
    /// The region a host of the service names, which a request to it is
    /// signed for.
    pub region_of_host: fn(&str) -> Option<&str>,
}

/// What a request to an endpoint is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// A turn of a conversation: its response may carry recall calls to
    /// answer, its usage goes to the ledger, and it moves the conversation's
    /// prompt-cache clock.
    Turn,
    /// A count of the tokens a turn would take: rewritten as that turn
    /// would be (so the count is of what the model would see), the response
    /// forwarded as it is. No turn, no usage, and it never touches the
    /// provider's cache.
    CountTokens,
}

/// A body that carries the request it stands for inside it (Bedrock's
/// CountTokens carries the invoke body in base64): the proxy opens it,
/// rewrites what is inside as a request to `inner` would be, and closes it
/// again. What it cannot open goes as it came.
pub struct Envelope {
    /// The endpoint the carried body is a request to.
    pub inner: &'static Endpoint,
    /// The carried body, if the envelope holds one.
    pub open: fn(&[u8]) -> Option<Vec<u8>>,
    /// The envelope with `inner` (rewritten) in place of what it carried.
    pub close: fn(&[u8], &[u8]) -> Option<Vec<u8>>,
}

/// How an API names the responses its upstream stores. The client is
/// answered with the first round's id while the upstream's conversation went
/// on to the last recall round's; the proxy keeps which upstream id a client
/// id stands for, and uses these to swap one for the other.
pub struct ResponseIds {
    /// The route's name in metrics for a request to one stored response.
    pub label: &'static str,
    /// The stored response a path names (a request to it is not a turn).
    pub in_path: fn(&str) -> Option<&str>,
    /// The stored response a request's body continues.
    pub continued: fn(&[u8]) -> Option<String>,
    /// The body continuing the given id instead.
    pub continue_from: fn(&str, &str) -> Option<String>,
    /// A fetched response as the client knows it: the client's id, the
    /// output the client was answered (JSON), and none of the recall tools.
    pub as_the_client_saw: fn(&str, &str, &str, &RecallToolNames) -> Option<String>,
}

/// The endpoint whose stored responses `path` names one of, with how it
/// names them.
pub fn stored_response(path: &str) -> Option<(&'static Endpoint, &'static ResponseIds)> {
    ENDPOINTS.iter().copied().find_map(|endpoint| {
        let ids = endpoint.response_ids?;
        (ids.in_path)(path).map(|_| (endpoint, ids))
    })
}

impl std::fmt::Debug for ResponseIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label)
    }
}

impl PartialEq for ResponseIds {
    fn eq(&self, other: &ResponseIds) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for ResponseIds {}

/// One route a protocol serves.
pub struct Endpoint {
    /// Its name in metrics and in the ledger.
    pub label: &'static str,
    /// The wire format of its bodies and responses.
    pub protocol: &'static dyn Protocol,
    /// Whether a `POST` to this path is for it.
    pub serves: fn(&str) -> bool,
    /// A parameter its query must carry for the adapter to read the
    /// exchange (the Gemini API streams server-sent events only with
    /// `alt=sse`, else one JSON array the adapter does not splice):
    /// without it, the request goes upstream as it came.
    pub query_needs: Option<&'static str>,
    pub purpose: Purpose,
    /// The model the path names (the Gemini API's, Claude's on Vertex AI
    /// and on Bedrock: their bodies name none).
    pub model_in_path: fn(&str) -> Option<String>,
    /// Whether its responses stream, where the path says so and the body
    /// does not (Bedrock's `invoke` and `invoke-with-response-stream`);
    /// `None`: as the body says.
    pub streams: Option<bool>,
    pub framing: Framing,
    /// The AWS service that authenticates requests to it by a SigV4
    /// signature over the body (Bedrock's): the proxy checks a client's
    /// signature before it reads the body, and may sign for the caller.
    pub aws: Option<&'static AwsService>,
    /// Its responses are stored upstream under ids that a request may
    /// continue from or a path fetch (the Responses API's): the proxy maps
    /// the ids its client saw to the upstream's.
    pub response_ids: Option<&'static ResponseIds>,
    pub envelope: Option<Envelope>,
}

impl Endpoint {
    /// A conversation's turn, served as [`Purpose::Turn`], with none of the
    /// optional steps; protocols spell out only what differs.
    pub const fn turn(
        label: &'static str,
        protocol: &'static dyn Protocol,
        serves: fn(&str) -> bool,
    ) -> Endpoint {
        Endpoint {
            label,
            protocol,
            serves,
            query_needs: None,
            purpose: Purpose::Turn,
            model_in_path: no_model,
            streams: None,
            framing: Framing::Sse,
            aws: None,
            response_ids: None,
            envelope: None,
        }
    }

    /// Whether its responses may carry recall calls the proxy answers.
    pub fn is_turn(&self) -> bool {
        self.purpose == Purpose::Turn
    }

    /// Whether the adapter reads an exchange asked with `query`
    /// ([`Endpoint::query_needs`]).
    pub fn reads_query(&self, query: Option<&str>) -> bool {
        self.query_needs
            .is_none_or(|needed| query.is_some_and(|q| q.split('&').any(|param| param == needed)))
    }

    /// The model `path` names, for a body that names none.
    pub fn model_in(&self, path: &str) -> Option<String> {
        (self.model_in_path)(path)
    }
}

/// For an endpoint whose path names no model.
pub fn no_model(_path: &str) -> Option<String> {
    None
}

impl PartialEq for Endpoint {
    fn eq(&self, other: &Endpoint) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for Endpoint {}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path of each endpoint, as its clients send it.
    const PATHS: &[(&str, &str)] = &[
        ("/v1/chat/completions", "chat_completions"),
        ("/openai/v1/chat/completions", "chat_completions"),
        ("/v1/messages", "messages"),
        (
            "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514:rawPredict",
            "messages",
        ),
        (
            "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514:streamRawPredict",
            "messages",
        ),
        ("/v1/messages/count_tokens", "count_tokens"),
        (
            "/v1/projects/p/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict",
            "count_tokens",
        ),
        ("/v1/responses", "responses"),
        ("/model/anthropic.claude-3-5-sonnet-20240620-v1:0/invoke", "bedrock_invoke"),
        (
            "/model/anthropic.claude-3-5-sonnet-20240620-v1:0/invoke-with-response-stream",
            "bedrock_invoke_stream",
        ),
        ("/model/anthropic.claude-3-5-sonnet-20240620-v1:0/count-tokens", "bedrock_count_tokens"),
        ("/v1beta/models/gemini-2.5-pro:generateContent", "generate_content"),
        ("/v1beta/models/gemini-2.5-pro:streamGenerateContent", "stream_generate_content"),
        ("/v1beta/models/gemini-2.5-pro:countTokens", "gemini_count_tokens"),
    ];

    #[test]
    fn each_path_has_one_endpoint() {
        for (path, label) in PATHS {
            let serving: Vec<&str> = ENDPOINTS
                .iter()
                .filter(|e| (e.serves)(path))
                .map(|e| e.label)
                .collect();
            assert_eq!(serving, [*label], "{path}");
            assert_eq!(route(path).map(|e| e.label), Some(*label), "{path}");
        }
        for path in [
            "/v1/models",
            "/v1/embeddings",
            "/v1/responses/resp_1",
            "/healthz",
        ] {
            assert_eq!(route(path), None, "{path}");
        }
        // A stored response's path is no endpoint's to rewrite, but the
        // endpoint that stores it names it; no served path names one.
        let stored = |path| stored_response(path).map(|(e, ids)| (e.label, ids.label));
        let responses = Some(("responses", "response_by_id"));
        assert_eq!(stored("/v1/responses/resp_1"), responses);
        assert_eq!(stored("/openai/v1/responses/resp_1/input_items"), responses);
        assert_eq!(stored("/v1/models"), None);
        for (path, _) in PATHS {
            assert_eq!(stored(path), None, "{path}");
        }
    }

    #[test]
    fn labels_are_unique() {
        let mut labels: Vec<&str> = ENDPOINTS.iter().map(|e| e.label).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), ENDPOINTS.len());
    }

    #[test]
    fn the_paths_that_name_a_model_give_it() {
        let model = |path: &str| route(path).and_then(|e| e.model_in(path));
        assert_eq!(
            model("/v1beta/models/gemini-2.5-pro:streamGenerateContent").as_deref(),
            Some("gemini-2.5-pro")
        );
        assert_eq!(
            model("/v1/projects/p/locations/l/publishers/anthropic/models/claude-x@1:rawPredict")
                .as_deref(),
            Some("claude-x@1")
        );
        assert_eq!(
            model("/model/anthropic.claude-v2%3A1/invoke").as_deref(),
            Some("anthropic.claude-v2:1")
        );
        assert_eq!(
            model("/model/anthropic.claude-v2%3A1/count-tokens").as_deref(),
            Some("anthropic.claude-v2:1")
        );
        assert_eq!(model("/v1/messages"), None);
        assert_eq!(model("/v1/chat/completions"), None);
    }

    #[test]
    fn only_a_count_of_tokens_is_no_turn_and_only_bedrock_streams_frames() {
        for e in ENDPOINTS {
            assert_eq!(e.is_turn(), !e.label.ends_with("count_tokens"), "{e:?}");
            assert_eq!(
                e.framing == Framing::EventStream,
                e.label == "bedrock_invoke_stream"
            );
            assert_eq!(e.aws.is_some(), e.label.starts_with("bedrock_"), "{e:?}");
            if let Some(envelope) = &e.envelope {
                assert!(envelope.inner.is_turn() && envelope.inner.envelope.is_none());
            }
        }
    }
}
