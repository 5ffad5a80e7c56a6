//! The proxy's own failures: each knows its HTTP status, a low-cardinality
//! label, and its body in the format of the API the client speaks
//! ([`Flavor`]: OpenAI's `{"error":{"message","type","code"}}` or
//! Anthropic's `{"type":"error","error":{"type","message"}}`). Upstream
//! errors (4xx/5xx answered by the upstream) are not these: they pass
//! through as they are.

use super::body::{full, BoxBody};
use crate::protocol::Flavor;
use http::{header, Response, StatusCode};

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The upstream could not be reached (refused, DNS, TLS, reset).
    #[error("upstream unreachable: {0}")]
    UpstreamUnreachable(String),
    /// The upstream did not send its response headers in time.
    #[error("upstream did not answer within {0} ms")]
    UpstreamTimeout(u128),
    /// The upstream's response body was silent for longer than
    /// `upstream.idle_timeout_ms` while the proxy had to read it whole.
    #[error("the upstream response sent nothing for {0} ms")]
    UpstreamIdle(u128),
    /// The upstream compressed a response the proxy must read with an
    /// encoding it cannot decode.
    #[error("{0}")]
    UpstreamEncoding(String),
    /// A response the proxy must read whole (for recall calls) is larger
    /// than it reads.
    #[error("{0}")]
    UpstreamTooLarge(String),
    /// The proxy holds as much as its bounds allow (connections, buffered
    /// bytes); the answer carries `Retry-After`.
    #[error("{0}")]
    Overloaded(String),
    /// The client did not send its body in time.
    #[error("request body not received within {0} ms")]
    BodyTimeout(u128),
    /// Reading the client's body failed.
    #[error("could not read the request body: {0}")]
    BodyRead(String),
    /// The store failed and `failure_mode = reject`.
    #[error("toolstub could not store the tool outputs of this request: {0}")]
    StoreRejected(String),
    /// A malformed operator API request.
    #[error("{0}")]
    BadRequest(String),
    /// No such result for this tenant (also for another tenant's ref).
    #[error("{0}")]
    NotFound(String),
    /// The result existed but retention removed it: 410 Gone, code
    /// `expired`, so an operator can tell it from a ref that never existed.
    #[error("{0}")]
    Expired(String),
    /// An operator API path asked for with a method other than GET (the
    /// response carries `Allow: GET`).
    #[error("method {0} is not allowed here; the operator API answers GET only")]
    MethodNotAllowed(String),
    /// The operator API's admin token is missing or wrong.
    #[error("the operator API requires a valid admin token in the x-toolstub-admin-token header")]
    Unauthorized,
    /// No client key, or one toolstub does not know, where one is required.
    #[error("{0}")]
    Unauthenticated(&'static str),
    /// Refused whoever the caller is (another machine, a web page) in the
    /// local case.
    #[error("{0}")]
    Forbidden(&'static str),
    /// Client keys could not be read from the store yet.
    #[error("toolstub cannot check client keys now: its store is unavailable")]
    KeysUnknown,
    /// A bug or an unexpected condition inside toolstub.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ProxyError {
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::UpstreamUnreachable(_) => StatusCode::BAD_GATEWAY,
            ProxyError::UpstreamTimeout(_) | ProxyError::UpstreamIdle(_) => {
                StatusCode::GATEWAY_TIMEOUT
            }
            ProxyError::UpstreamEncoding(_) | ProxyError::UpstreamTooLarge(_) => {
                StatusCode::BAD_GATEWAY
            }
            ProxyError::Overloaded(_) => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ProxyError::BodyRead(_) | ProxyError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ProxyError::StoreRejected(_) => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::NotFound(_) => StatusCode::NOT_FOUND,
            ProxyError::Expired(_) => StatusCode::GONE,
            ProxyError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ProxyError::Unauthorized | ProxyError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            ProxyError::Forbidden(_) => StatusCode::FORBIDDEN,
            ProxyError::KeysUnknown => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The `error.code` field and the metrics label.
    pub fn code(&self) -> &'static str {
        match self {
            ProxyError::UpstreamUnreachable(_) => "upstream_unreachable",
            ProxyError::UpstreamTimeout(_) => "upstream_timeout",
            ProxyError::UpstreamIdle(_) => "upstream_idle_timeout",
            ProxyError::UpstreamEncoding(_) => "upstream_encoding",
            ProxyError::UpstreamTooLarge(_) => "upstream_too_large",
            ProxyError::Overloaded(_) => "overloaded",
            ProxyError::BodyTimeout(_) => "request_timeout",
            ProxyError::BodyRead(_) => "bad_request_body",
            ProxyError::StoreRejected(_) => "store_unavailable",
            ProxyError::BadRequest(_) => "invalid_request",
            ProxyError::NotFound(_) => "not_found",
            ProxyError::Expired(_) => "expired",
            ProxyError::MethodNotAllowed(_) => "method_not_allowed",
            ProxyError::Unauthorized => "unauthorized",
            ProxyError::Unauthenticated(_) => "invalid_client_key",
            ProxyError::Forbidden(_) => "forbidden",
            ProxyError::KeysUnknown => "keys_unavailable",
            ProxyError::Internal(_) => "internal_error",
        }
    }

    /// The error as a response in the client's API format.
    pub fn into_response(self, flavor: Flavor) -> Response<BoxBody> {
        let allow = matches!(self, ProxyError::MethodNotAllowed(_));
        let overloaded = matches!(self, ProxyError::Overloaded(_));
        let body = flavor.error_body(self.status().as_u16(), self.code(), &self.to_string());
        let mut response = Response::new(full(body));
        *response.status_mut() = self.status();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        if allow {
            response
                .headers_mut()
                .insert(header::ALLOW, header::HeaderValue::from_static("GET"));
        }
        if overloaded {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, super::limits::retry_after());
        }
        response
    }
}
