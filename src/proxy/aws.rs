//! SigV4 for the requests toolstub sends to Amazon Bedrock.
//!
//! A Bedrock request is signed over its body and its host, so the client's
//! signature cannot survive the proxy: the host is the proxy's, and a
//! rewritten body (or a recall round, which the client never sent) has
//! another hash. When AWS credentials are found in the standard places
//! (environment, shared config and credentials files, SSO, web identity,
//! container and instance credentials: `aws-config`'s default chain, read
//! on the first Bedrock request and refreshed before they expire), every
//! request to a Bedrock invoke path is signed again with them, for
//! `bedrock` in the region of its upstream host (else the client's
//! signature's, else `AWS_REGION`). Without credentials it goes as the
//! client signed it. Credentials are never logged or stored.

use super::body::BoxBody;
use aws_credential_types::provider::ProvideCredentials;
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use http::{header, HeaderMap, HeaderValue, Request};
use std::time::{Duration, SystemTime};
use tokio::sync::{Mutex, OnceCell};

/// Credentials this close to their expiry are fetched again.
const REFRESH_BEFORE: Duration = Duration::from_secs(300);

/// The headers of a client's own signature, replaced by the proxy's.
const SIGNATURE_HEADERS: [&str; 4] = [
    "authorization",
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-content-sha256",
];

pub struct AwsSigner {
    chain: OnceCell<aws_config::default_provider::credentials::DefaultCredentialsChain>,
    cached: Mutex<Option<Credentials>>,
    /// `AWS_REGION` (or `AWS_DEFAULT_REGION`) when the proxy started.
    region: Option<String>,
}

impl AwsSigner {
    pub fn new(region: Option<String>) -> AwsSigner {
        AwsSigner {
            chain: OnceCell::new(),
            cached: Mutex::new(None),
            region,
        }
    }

    /// Current credentials from the default chain; `None` when it finds none.
    async fn credentials(&self) -> Option<Credentials> {
        let mut cached = self.cached.lock().await;
        let fresh = |c: &Credentials| {
            c.expiry()
                .is_none_or(|at| at > SystemTime::now() + REFRESH_BEFORE)
        };
        if let Some(c) = cached.as_ref().filter(|c| fresh(c)) {
            return Some(c.clone());
        }
        let chain = self
            .chain
            .get_or_init(|| async {
                aws_config::default_provider::credentials::DefaultCredentialsChain::builder()
                    .build()
                    .await
            })
            .await;
        match chain.provide_credentials().await {
            Ok(c) => {
                *cached = Some(c.clone());
                Some(c)
            }
            Err(e) => {
                tracing::warn!(error = %e, "no AWS credentials: Bedrock requests go as the client signed them");
                None
            }
        }
    }

    /// Signs `request` (whose body is `body`) anew; `client` are the
    /// client's headers (its signature's scope names a region). Leaves it
    /// as it is when no credentials or no region are found.
    pub async fn sign(&self, request: &mut Request<BoxBody>, body: &[u8], client: &HeaderMap) {
        let host = request.uri().host().unwrap_or("").to_string();
        let region = crate::protocol::bedrock::region_of_host(&host)
            .map(str::to_string)
            .or_else(|| scope_region(client))
            .or_else(|| self.region.clone());
        let Some(region) = region else {
            tracing::warn!("no AWS region for a Bedrock request (set AWS_REGION): sent as the client signed it");
            return;
        };
        let Some(credentials) = self.credentials().await else {
            return;
        };
        for name in SIGNATURE_HEADERS {
            request.headers_mut().remove(name);
        }
        // host[:port], never a base URL's userinfo.
        let host_port = match (request.uri().host(), request.uri().port_u16()) {
            (Some(h), Some(p)) => Some(format!("{h}:{p}")),
            (Some(h), None) => Some(h.to_string()),
            _ => None,
        };
        if let Some(value) = host_port.and_then(|v| HeaderValue::from_str(&v).ok()) {
            request.headers_mut().insert(header::HOST, value);
        }
        let identity = credentials.into();
        let params = match v4::SigningParams::builder()
            .identity(&identity)
            .region(&region)
            .name("bedrock")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
        {
            Ok(p) => p.into(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot sign a Bedrock request");
                return;
            }
        };
        let uri = request.uri().to_string();
        let headers: Vec<(&str, &str)> = request
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)))
            .collect();
        let signed = SignableRequest::new(
            request.method().as_str(),
            uri,
            headers.into_iter(),
            SignableBody::Bytes(body),
        )
        .and_then(|signable| sign(signable, &params));
        match signed {
            Ok(output) => output.into_parts().0.apply_to_request_http1x(request),
            Err(e) => tracing::warn!(error = %e, "cannot sign a Bedrock request"),
        }
    }
}

/// The region of a SigV4 `Authorization` header's credential scope
/// (`Credential=AKID/20261202/us-east-1/bedrock/aws4_request`).
fn scope_region(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let scope = value
        .split("Credential=")
        .nth(1)?
        .split([',', ' '])
        .next()?;
    let mut parts = scope.split('/');
    let (_key, _date, region) = (parts.next()?, parts.next()?, parts.next()?);
    (!region.is_empty()).then(|| region.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_region_of_a_clients_signature() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261202/eu-central-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc"),
        );
        assert_eq!(scope_region(&headers).as_deref(), Some("eu-central-1"));
        assert_eq!(scope_region(&HeaderMap::new()), None);
    }
}
