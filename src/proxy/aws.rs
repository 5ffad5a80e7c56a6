//! SigV4 for the requests toolstub sends to Amazon Bedrock.
//!
//! A Bedrock request is signed over its body and its host, so the client's
//! signature cannot survive the proxy: the host is the proxy's, and a
//! rewritten body (or a recall round, which the client never sent) has
//! another hash. When AWS credentials are found in the standard places
//! (environment, shared config and credentials files, SSO, web identity,
//! container and instance credentials: `aws-config`'s default chain, read
//! on the first Bedrock request and refreshed before they expire), every
//! request to a Bedrock model path is signed again with them, for
//! `bedrock` in the region of its upstream host (else the client's
//! signature's, else `AWS_REGION`), when the client sent no
//! `Authorization` (it skipped its own AWS auth for this gateway) or its
//! SigV4 signature checks good against the proxy's own key (the same
//! identity, as under `toolstub wrap`); the key then names the tenant. Any
//! other request (a Bedrock API key, another identity's signature) goes as
//! the client sent it, and its tenant is not its access key, which is no
//! secret. Credentials are never logged or stored.

use super::body::BoxBody;
use aws_credential_types::provider::ProvideCredentials;
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use http::{header, HeaderMap, HeaderValue, Request};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use std::time::{Duration, SystemTime};
use tokio::sync::{Mutex, OnceCell};

use crate::protocol::endpoint::AwsService;
use crate::store::Tenant;

/// Credentials this close to their expiry are fetched again.
const REFRESH_BEFORE: Duration = Duration::from_secs(300);
/// After the chain found none, how long before it is asked again (each
/// ask may probe instance metadata, with its timeouts).
const RETRY_AFTER: Duration = Duration::from_secs(60);

/// The headers of a client's own signature, replaced by the proxy's.
const SIGNATURE_HEADERS: [&str; 4] = [
    "authorization",
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-content-sha256",
];

/// The last answer of the credential chain.
enum Cached {
    Nothing,
    Found(Credentials),
    /// None found, at this time.
    Missing(std::time::Instant),
}

pub struct AwsSigner {
    chain: OnceCell<aws_config::default_provider::credentials::DefaultCredentialsChain>,
    cached: Mutex<Cached>,
    /// `AWS_REGION` (or `AWS_DEFAULT_REGION`) when the proxy started.
    region: Option<String>,
}

impl AwsSigner {
    pub fn new(region: Option<String>) -> AwsSigner {
        AwsSigner {
            chain: OnceCell::new(),
            cached: Mutex::new(Cached::Nothing),
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
        match &*cached {
            Cached::Found(c) if fresh(c) => return Some(c.clone()),
            Cached::Missing(at) if at.elapsed() < RETRY_AFTER => return None,
            _ => {}
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
                *cached = Cached::Found(c.clone());
                Some(c)
            }
            Err(e) => {
                tracing::warn!(error = %e, "no AWS credentials: Bedrock requests go as the client signed them");
                *cached = Cached::Missing(std::time::Instant::now());
                None
            }
        }
    }

    /// What may be done with a client request's signature, and the tenant
    /// of its identity when its signature is checked good.
    pub async fn decide(
        &self,
        service: &'static AwsService,
        parts: &http::request::Parts,
        body: &[u8],
    ) -> (Signing, Option<Tenant>) {
        let Some(auth) = parts.headers.get(header::AUTHORIZATION) else {
            return (Signing::Resign(service), None);
        };
        if !auth.to_str().is_ok_and(is_sigv4) {
            return (Signing::AsSent, None);
        }
        let Some(credentials) = self.credentials().await else {
            return (Signing::AsSent, None);
        };
        match verified_key(
            parts,
            body,
            credentials.access_key_id(),
            credentials.secret_access_key(),
            SystemTime::now(),
        ) {
            Some(key) => (
                Signing::Resign(service),
                Some(identity_tenant(key, credentials.secret_access_key())),
            ),
            None => (Signing::AsSent, None),
        }
    }

    /// Signs `request` (whose body is `body`) anew; `client` are the
    /// client's headers (its signature's scope names a region). Leaves it
    /// as it is when no credentials or no region are found.
    pub async fn sign(
        &self,
        service: &AwsService,
        request: &mut Request<BoxBody>,
        body: &[u8],
        client: &HeaderMap,
    ) {
        let host = request.uri().host().unwrap_or("").to_string();
        let region = (service.region_of_host)(&host)
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
            .name(service.name)
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
    let region = ClientSignature::parse(value)?.region;
    (!region.is_empty()).then(|| region.to_string())
}

/// The tenant of an AWS identity whose signature checked good: `aws-` and
/// 16 hex digits of the SHA-256 of its access key id and secret key. The
/// access key id alone is no secret (every signed request shows it), so
/// it alone must not name a tenant.
fn identity_tenant(key_id: &str, secret: &str) -> Tenant {
    let digest = crate::refs::sha256(format!("aws-sigv4\n{key_id}\n{secret}").as_bytes());
    Tenant::named(format!("aws-{}", crate::refs::hex(&digest[..8])))
}

/// Whether requests to `host` may be signed with the AWS credentials the
/// proxy finds: AWS's own hosts (`*.amazonaws.com`, `*.amazonaws.com.cn`:
/// Bedrock's runtime endpoints, FIPS and VPC endpoints among them), or one
/// the operator lists (`upstream.aws_signing_hosts`). A signature is the
/// operator's identity for 15 minutes: it never goes to any other host.
pub fn may_sign_for(host: &str, listed: &[String]) -> bool {
    let host = host.to_ascii_lowercase();
    let aws = [".amazonaws.com", ".amazonaws.com.cn"]
        .iter()
        .any(|suffix| {
            host.strip_suffix(suffix).is_some_and(|name| {
                !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
            })
        });
    aws || listed.iter().any(|h| h.eq_ignore_ascii_case(&host))
}

/// Whether an `Authorization` value is a SigV4 signature.
pub fn is_sigv4(value: &str) -> bool {
    value.starts_with("AWS4-HMAC-SHA256")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request as a client signs it for the proxy's host, with
    /// `aws-sigv4` itself.
    fn signed_for_the_proxy(secret: &str, body: &[u8]) -> http::request::Parts {
        let mut request = http::Request::builder()
            .method("POST")
            .uri("http://127.0.0.1:8790/model/us.anthropic.claude-x-v1%3A0/invoke-with-response-stream")
            .header("host", "127.0.0.1:8790")
            .header("content-type", "application/json")
            .header("anthropic-beta", "a,  b")
            .body(())
            .expect("request");
        let identity = Credentials::new("AKIDPROXY", secret, None, None, "test").into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region("us-east-1")
            .name("bedrock")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .expect("params")
            .into();
        let headers: Vec<(String, String)> = request
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().expect("ascii").to_string()))
            .collect();
        let signable = SignableRequest::new(
            "POST",
            request.uri().to_string(),
            headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            SignableBody::Bytes(body),
        )
        .expect("signable");
        sign(signable, &params)
            .expect("signed")
            .into_parts()
            .0
            .apply_to_request_http1x(&mut request);
        request.into_parts().0
    }

    #[test]
    fn a_clients_signature_by_the_proxys_key_is_checked() {
        let body = br#"{"anthropic_version":"bedrock-2023-05-31"}"#;
        let parts = signed_for_the_proxy("the-secret", body);
        let now = SystemTime::now();
        assert_eq!(
            verified_key(&parts, body, "AKIDPROXY", "the-secret", now),
            Some("AKIDPROXY")
        );
        assert_eq!(
            verified_key(&parts, b"{}", "AKIDPROXY", "the-secret", now),
            None,
            "another body"
        );
        assert_eq!(
            verified_key(&parts, body, "AKIDPROXY", "not-it", now),
            None,
            "another secret"
        );
        assert_eq!(
            verified_key(&parts, body, "AKIDOTHER", "the-secret", now),
            None,
            "another key"
        );
        let late = now + Duration::from_secs(3_600);
        assert_eq!(
            verified_key(&parts, body, "AKIDPROXY", "the-secret", late),
            None,
            "too old"
        );
        let mut forged = parts;
        forged
            .headers
            .insert("anthropic-beta", HeaderValue::from_static("c"));
        assert_eq!(
            verified_key(&forged, body, "AKIDPROXY", "the-secret", now),
            None,
            "a header changed"
        );
        // A claimed payload hash must be this body's.
        let mut claimed = signed_for_the_proxy("the-secret", body);
        let other = crate::refs::hex(&crate::refs::sha256(b"{}"));
        claimed.headers.insert(
            "x-amz-content-sha256",
            HeaderValue::from_str(&other).expect("hex"),
        );
        assert_eq!(
            verified_key(&claimed, b"{}", "AKIDPROXY", "the-secret", now),
            None
        );
        assert_eq!(
            verified_key(&claimed, body, "AKIDPROXY", "the-secret", now),
            None
        );
        let own = crate::refs::hex(&crate::refs::sha256(body));
        claimed.headers.insert(
            "x-amz-content-sha256",
            HeaderValue::from_str(&own).expect("hex"),
        );
        assert_eq!(
            verified_key(&claimed, body, "AKIDPROXY", "the-secret", now),
            Some("AKIDPROXY")
        );
        claimed.headers.insert(
            "x-amz-content-sha256",
            HeaderValue::from_static("UNSIGNED-PAYLOAD"),
        );
        assert_eq!(
            verified_key(&claimed, body, "AKIDPROXY", "the-secret", now),
            None
        );
        assert_eq!(
            parse_amz_date("20261202T140453Z"),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_220_293))
        );
        assert_eq!(parse_amz_date("2026-12-02"), None);
        assert_eq!(parse_amz_date("20261202T 4 453Z"), None);
        assert_eq!(parse_amz_date("20261302T140453Z"), None);
    }

    #[test]
    fn an_identitys_tenant_needs_its_secret_and_signing_needs_an_aws_host() {
        let a = identity_tenant("AKIDPROXY", "the-secret");
        assert_eq!(a, identity_tenant("AKIDPROXY", "the-secret"));
        assert_ne!(a, identity_tenant("AKIDPROXY", "another-secret"));
        assert_ne!(
            a,
            Tenant::from_credential("AKIDPROXY"),
            "the key id alone names nothing"
        );
        assert!(a.as_str().starts_with("aws-"));
        let listed = vec!["bedrock.gateway.internal".to_string()];
        for host in [
            "bedrock-runtime.us-east-1.amazonaws.com",
            "bedrock-runtime-fips.us-gov-west-1.amazonaws.com",
            "vpce-1a2b.bedrock-runtime.eu-west-1.vpce.amazonaws.com",
            "bedrock-runtime.cn-north-1.amazonaws.com.cn",
            "Bedrock.Gateway.Internal",
        ] {
            assert!(may_sign_for(host, &listed), "{host}");
        }
        for host in [
            "127.0.0.1",
            "amazonaws.com",
            "attacker.example",
            "amazonaws.com.attacker.example",
            "bedrock-runtime.us-east-1.amazonaws.com.attacker.example",
            "x_y.amazonaws.com",
        ] {
            assert!(!may_sign_for(host, &listed), "{host}");
        }
    }

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

/// What the proxy may do with a signed endpoint's request's signature,
/// decided once per client request (kept in its extensions).
#[derive(Clone, Copy)]
pub enum Signing {
    /// Sign it again for the service with the proxy's credentials: the
    /// client sent no `Authorization` (it skipped its own AWS auth for this
    /// gateway), or its SigV4 signature was checked good against the
    /// proxy's own key.
    Resign(&'static AwsService),
    /// Leave it as the client sent it (a Bedrock API key, or a signature
    /// by a key the proxy does not hold).
    AsSent,
}

/// A client's SigV4 `Authorization`, parsed.
struct ClientSignature<'a> {
    key_id: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    signed_headers: &'a str,
    signature: &'a str,
}

impl<'a> ClientSignature<'a> {
    fn parse(value: &'a str) -> Option<ClientSignature<'a>> {
        let rest = value.strip_prefix("AWS4-HMAC-SHA256 ")?;
        let mut credential = None;
        let mut signed_headers = None;
        let mut signature = None;
        for field in rest.split(',') {
            let (name, v) = field.trim().split_once('=')?;
            match name {
                "Credential" => credential = Some(v),
                "SignedHeaders" => signed_headers = Some(v),
                "Signature" => signature = Some(v),
                _ => {}
            }
        }
        let mut scope = credential?.split('/');
        let (key_id, date, region, service) =
            (scope.next()?, scope.next()?, scope.next()?, scope.next()?);
        (scope.next()? == "aws4_request").then_some(ClientSignature {
            key_id,
            date,
            region,
            service,
            signed_headers: signed_headers?,
            signature: signature?,
        })
    }
}

/// The access key id of a request whose SigV4 signature is good for
/// `secret`'s key (`key_id`), made within 15 minutes of `now`.
fn verified_key<'a>(
    parts: &'a http::request::Parts,
    body: &[u8],
    key_id: &str,
    secret: &str,
    now: SystemTime,
) -> Option<&'a str> {
    use sha2::{Digest, Sha256};
    let auth = parts.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let sig = ClientSignature::parse(auth)?;
    if sig.key_id != key_id {
        return None;
    }
    let amz_date = parts.headers.get("x-amz-date")?.to_str().ok()?;
    let signed_at = parse_amz_date(amz_date)?;
    let skew = now
        .duration_since(signed_at)
        .or_else(|e| Ok::<_, ()>(e.duration()))
        .ok()?;
    if skew > Duration::from_secs(900) || !amz_date.starts_with(sig.date) {
        return None;
    }
    // SigV4's encoding: every byte but letters, digits and `-_.~`.
    const KEPT: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    let encode = |s: &str| utf8_percent_encode(s, KEPT).to_string();
    // The path the client signed: wrap's run secret was in it.
    let path = parts
        .extensions
        .get::<super::access::OriginalPath>()
        .map_or(parts.uri.path(), |sent| sent.0.as_str());
    let canonical_uri: Vec<String> = path.split('/').map(encode).collect();
    let mut query: Vec<(String, String)> = parts
        .uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let decoded = |s: &str| crate::percent::decode(s, false).map(|d| encode(&d));
            Some((decoded(k)?, decoded(v)?))
        })
        .collect::<Option<_>>()?;
    query.sort();
    let canonical_query: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut canonical_headers = String::new();
    for name in sig.signed_headers.split(';') {
        let values: Vec<String> = parts
            .headers
            .get_all(name)
            .iter()
            .map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        if values.is_empty() {
            return None;
        }
        canonical_headers.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    // The body's own hash, whatever the client claims: a signature over
    // `UNSIGNED-PAYLOAD`, or over another body, is no signature of this
    // one (a captured signature replayed with a new body must not pass).
    let payload = crate::refs::hex(&Sha256::digest(body));
    if let Some(claimed) = parts.headers.get("x-amz-content-sha256") {
        if claimed.as_bytes() != payload.as_bytes() {
            return None;
        }
    }
    let canonical = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        parts.method,
        canonical_uri.join("/"),
        canonical_query.join("&"),
        canonical_headers,
        sig.signed_headers,
        payload
    );
    let scope = format!("{}/{}/{}/aws4_request", sig.date, sig.region, sig.service);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        crate::refs::hex(&Sha256::digest(canonical.as_bytes()))
    );
    let key = v4::generate_signing_key(secret, signed_at, sig.region, sig.service);
    let want = v4::calculate_signature(key, to_sign.as_bytes());
    // Compared in constant time: a timing difference must not tell a
    // forger how many leading characters were right.
    crate::auth::same_secret(sig.signature, &want).then_some(sig.key_id)
}

/// `20261202T140453Z` as a time.
fn parse_amz_date(value: &str) -> Option<SystemTime> {
    // Exactly eight digits, `T`, six digits, `Z` (chrono alone would take
    // spaces and one-digit fields).
    let b = value.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' || !digits(0..8) || !digits(9..15) {
        return None;
    }
    let t = chrono::NaiveDateTime::parse_from_str(value, "%Y%m%dT%H%M%SZ").ok()?;
    let secs = u64::try_from(t.and_utc().timestamp()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}
