//! A Google access token for Vertex AI requests that carry none.
//!
//! A client usually sends its own bearer token, which goes through as it is.
//! One told to skip its own Google auth (Claude Code's
//! `CLAUDE_CODE_SKIP_VERTEX_AUTH=1`, for a gateway that authenticates
//! upstream) sends none: toolstub then adds one for the
//! `cloud-platform` scope, from the standard sources (`gcp_auth`: the
//! service-account key file of `GOOGLE_APPLICATION_CREDENTIALS`, the
//! application-default credentials of `gcloud auth application-default
//! login`, the metadata server, `gcloud`), found on the first such request
//! and cached until shortly before it expires. Tokens are never logged or
//! stored.

use super::body::BoxBody;
use http::{header, HeaderValue, Request};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// After no Google credentials were found, how long before they are looked
/// for again (the metadata server may just have been slow).
const RETRY_AFTER: Duration = Duration::from_secs(60);

const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// Whether a request on `path` to `host` may be given a Google token: a
/// call on a Vertex AI publisher's model, to Vertex AI's own hosts or one
/// the operator listed (`upstream.google_token_hosts`), never a gateway or
/// another provider.
pub fn may_authorize(path: &str, host: Option<&str>, listed: &[String]) -> bool {
    use crate::protocol::vertex;
    vertex::is_model_path(path)
        && host.is_some_and(|h| vertex::is_host(h) || listed.iter().any(|t| t == h))
}

#[derive(Default)]
pub struct GcpAuth {
    provider: Mutex<Source>,
}

#[derive(Default)]
enum Source {
    #[default]
    Unknown,
    Found(Arc<dyn gcp_auth::TokenProvider>),
    Missing(Instant),
}

impl GcpAuth {
    /// Adds a bearer token to `request` when it has no `Authorization` and
    /// a token source is found; leaves it as it is otherwise.
    pub async fn authorize(&self, request: &mut Request<BoxBody>) {
        if request.headers().contains_key(header::AUTHORIZATION) {
            return;
        }
        let provider = {
            let mut source = self.provider.lock().await;
            match &*source {
                Source::Found(p) => p.clone(),
                Source::Missing(at) if at.elapsed() < RETRY_AFTER => return,
                _ => match gcp_auth::provider().await {
                    Ok(p) => {
                        *source = Source::Found(p.clone());
                        p
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "no Google credentials: Vertex AI requests without a token go as they are");
                        *source = Source::Missing(Instant::now());
                        return;
                    }
                },
            }
        };
        match provider.token(&[SCOPE]).await {
            Ok(token) => {
                if let Ok(value) = HeaderValue::from_str(&format!("Bearer {}", token.as_str())) {
                    request.headers_mut().insert(header::AUTHORIZATION, value);
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot get a Google access token"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::may_authorize;

    #[test]
    fn a_google_token_goes_only_to_vertex_ai_or_a_listed_host() {
        let path = "/v1/projects/p/locations/us-east5/publishers/anthropic/models/c:rawPredict";
        let listed = vec!["gateway.internal".to_string()];
        assert!(may_authorize(
            path,
            Some("us-east5-aiplatform.googleapis.com"),
            &[]
        ));
        assert!(may_authorize(path, Some("gateway.internal"), &listed));
        for host in [
            "api.anthropic.com",
            "aiplatform.googleapis.com.attacker.example",
            "gateway.internal",
        ] {
            assert!(!may_authorize(path, Some(host), &[]), "{host}");
        }
        assert!(!may_authorize(path, None, &listed));
        let not_a_model = "/v1beta/models/m:generateContent";
        assert!(!may_authorize(
            not_a_model,
            Some("aiplatform.googleapis.com"),
            &[]
        ));
    }
}
