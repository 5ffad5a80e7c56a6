//! The upstream client: hyper-util's pooled HTTP/1 client over HTTP or
//! HTTPS (rustls, Mozilla's roots plus an optional CA file), the upstream
//! URL for a request, and the header rules (hop-by-hop headers, `Host` and
//! `x-toolstub-*` never go upstream).
//!
//! The client keeps connections per origin (`pool_max_idle_per_host` idle
//! at most, closed after `pool_idle_timeout`), sends a request again on
//! another connection when a kept one turns out closed before any of it
//! went out, and adds the `Host` header a request lacks.

use super::body::BoxBody;
use super::error::ProxyError;
use crate::config::{HeldKeys, UpstreamConfig};
use crate::protocol::{endpoint, Flavor};
use anyhow::{Context, Result};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::time::{Duration, Instant};

/// Headers that describe one connection, not the request (RFC 9110 7.6.1).
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

pub struct Upstream {
    client: Client<HttpsConnector<HttpConnector>, BoxBody>,
    base: Uri,
    /// The `Host` header of a request to `base`, as the client would
    /// write it (built once, not per request).
    base_host: Option<HeaderValue>,
    /// Where Anthropic requests go when no `upstream.base_url` is set.
    anthropic_base: Option<Uri>,
    /// Where Gemini API requests go when no `upstream.base_url` is set.
    gemini_base: Option<Uri>,
    /// The proxy's AWS region (`AWS_REGION`), read once: where a Bedrock
    /// runtime path goes when no `upstream.base_url` is set.
    aws_region: Option<String>,
    /// (path prefix, base URL), longest prefix first (`upstream.routes`).
    routes: Vec<(String, Uri)>,
    first_byte_timeout: Duration,
    /// How long a response body may be silent once its head is in.
    idle_timeout: Duration,
}

/// An upstream response's body, ended by the idle timeout.
pub type UpstreamBody = super::timeouts::Idle<Incoming>;

impl Upstream {
    pub fn new(config: &UpstreamConfig) -> Result<Upstream> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(path) = &config.ca_file {
            use rustls_pki_types::pem::PemObject;
            let certs = rustls_pki_types::CertificateDer::pem_file_iter(path)
                .with_context(|| format!("cannot read upstream.ca_file {}", path.display()))?;
            let mut added = 0;
            for cert in certs {
                let cert = cert.with_context(|| format!("invalid PEM in {}", path.display()))?;
                roots
                    .add(cert)
                    .with_context(|| format!("invalid CA certificate in {}", path.display()))?;
                added += 1;
            }
            if added == 0 {
                anyhow::bail!("upstream.ca_file {} holds no certificate", path.display());
            }
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(config.connect_timeout));
        http.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(config.pool_idle_timeout)
            .pool_max_idle_per_host(config.pool_max_idle_per_host)
            .build(connector);
        Ok(Upstream {
            client,
            base: config.base_url.clone(),
            base_host: host_value(&config.base_url),
            anthropic_base: config.anthropic_base.clone(),
            gemini_base: config.gemini_base.clone(),
            aws_region: super::aws_region(),
            routes: config.routes.clone(),
            first_byte_timeout: config.first_byte_timeout,
            idle_timeout: config.idle_timeout,
        })
    }

    /// The route a request path takes: the matching `upstream.routes`
    /// prefix with its base URL, or `""` and the default upstream (for an
    /// Anthropic or Gemini request, that provider's when no
    /// `upstream.base_url` is set).
    fn route(&self, path: &str, flavor: Flavor) -> (&str, &Uri) {
        let provider = match flavor {
            Flavor::Anthropic => self.anthropic_base.as_ref(),
            Flavor::Google => self.gemini_base.as_ref(),
            Flavor::OpenAi => None,
        };
        let default = provider.unwrap_or(&self.base);
        self.routes
            .iter()
            .find(|(prefix, _)| {
                path.strip_prefix(prefix.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(['/', '?']))
            })
            .map_or(("", default), |(prefix, base)| (prefix.as_str(), base))
    }

    /// Whether the host of a request to `path` is picked by provider: no
    /// single upstream is set and no `upstream.routes` prefix matches.
    pub fn picks_by_provider(&self, path: &str) -> bool {
        self.gemini_base.is_some() && self.route(path, Flavor::OpenAi).0.is_empty()
    }

    /// The upstream URL of a request: its route's base URL + the path (its
    /// route prefix removed) and query. `flavor`: the API the request
    /// speaks, as its errors tell it.
    pub fn uri_for(&self, path_and_query: &str, flavor: Flavor) -> Result<Uri, ProxyError> {
        let (route, base) = self.route(path_and_query, flavor);
        let rest = &path_and_query[route.len()..];
        let path_and_query = if rest.is_empty() || rest.starts_with('?') {
            format!("/{rest}")
        } else {
            rest.to_string()
        };
        let prefix = base.path().trim_end_matches('/');
        let scheme = base.scheme_str().unwrap_or("https");
        let authority = base
            .authority()
            .map(|a| a.as_str())
            .ok_or_else(|| ProxyError::Internal("upstream URL has no host".to_string()))?;
        // With no single upstream, a path that names its host (a cloud's:
        // Bedrock's runtime, Vertex AI's locations) goes there over HTTPS,
        // as the client would have sent it.
        if route.is_empty() && self.gemini_base.is_some() {
            let path = path_and_query.split('?').next().unwrap_or("");
            match endpoint::host_named_by(path, self.aws_region.as_deref()) {
                Some(Ok(host)) => {
                    return format!("https://{host}{path_and_query}")
                        .parse()
                        .map_err(|e| {
                            ProxyError::BadRequest(format!("cannot build the upstream URL: {e}"))
                        })
                }
                Some(Err(why)) => return Err(ProxyError::BadRequest(why.to_string())),
                None => {}
            }
        }
        format!("{scheme}://{authority}{prefix}{path_and_query}")
            .parse()
            .map_err(|e| ProxyError::BadRequest(format!("cannot build the upstream URL: {e}")))
    }

    /// [`Upstream::uri_for`] of a request's URI, with the `Host` header it
    /// goes with when known. A request to the single upstream, whose base
    /// URL has no path, takes the request's own path and query and the
    /// base's scheme and authority as they are (nothing formatted or parsed
    /// again) and the base's `Host` header, built once; any other is built
    /// by `uri_for`, and the client adds its `Host`.
    pub fn target(
        &self,
        uri: &Uri,
        flavor: Flavor,
    ) -> Result<(Uri, Option<HeaderValue>), ProxyError> {
        let path_and_query = uri.path_and_query();
        let pq = path_and_query.map_or("/", |pq| pq.as_str());
        let (route, base) = self.route(pq, flavor);
        let plain = route.is_empty()
            && std::ptr::eq(base, &self.base)
            && self.gemini_base.is_none()
            && matches!(base.path(), "" | "/")
            && pq.starts_with('/');
        if let (true, Some(path_and_query)) = (plain, path_and_query) {
            let mut parts = http::uri::Parts::default();
            parts.scheme = Some(base.scheme().cloned().unwrap_or(http::uri::Scheme::HTTPS));
            parts.authority = base.authority().cloned();
            parts.path_and_query = Some(path_and_query.clone());
            if let Ok(target) = Uri::from_parts(parts) {
                return Ok((target, self.base_host.clone()));
            }
        }
        Ok((self.uri_for(pq, flavor)?, None))
    }

    /// Sends a request and waits for the response headers, within the
    /// first-byte timeout; its body then ends if it is silent for the idle
    /// timeout. Dropping the returned future cancels the request. A request
    /// whose own body was cut by its deadline is the client's fault (408).
    pub async fn send(
        &self,
        request: Request<BoxBody>,
    ) -> Result<(Response<UpstreamBody>, Duration), ProxyError> {
        let started = Instant::now();
        // An error names the upstream's host and port (never the userinfo
        // a base URL may hold), so an operator sees which upstream failed.
        let origin = match (request.uri().host(), request.uri().port_u16()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_string(),
            _ => String::new(),
        };
        match tokio::time::timeout(self.first_byte_timeout, self.client.request(request)).await {
            Err(_) => Err(ProxyError::UpstreamTimeout(
                self.first_byte_timeout.as_millis(),
            )),
            Ok(Err(e)) => Err(
                match super::timeouts::find::<super::timeouts::BodyDeadline>(&e) {
                    Some(deadline) => ProxyError::BodyTimeout(deadline.0),
                    None => ProxyError::UpstreamUnreachable(format!("{origin}: {}", chain(&e))),
                },
            ),
            Ok(Ok(response)) => {
                let idle = self.idle_timeout;
                let response = response.map(|body| super::timeouts::Idle::new(body, idle));
                Ok((response, started.elapsed()))
            }
        }
    }
}

/// An error and its sources on one line (hyper's errors hide the cause).
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The `Host` header of a request to `uri`: the host, and the port unless
/// it is the scheme's default.
fn host_value(uri: &Uri) -> Option<HeaderValue> {
    let host = uri.host()?;
    let secure = matches!(uri.scheme_str(), Some("https" | "wss"));
    let value = match uri.port_u16() {
        Some(443) if secure => host.to_string(),
        Some(80) if !secure => host.to_string(),
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    HeaderValue::from_str(&value).ok()
}

/// The client's headers as they go upstream: without hop-by-hop headers
/// (including those the `Connection` header names), `Host`, `Expect` (the
/// proxy reads or streams the body itself) and the proxy's own
/// `x-toolstub-*` headers. It runs on every request: the map is cloned
/// (names and values are reference-counted, nothing is hashed again) and
/// only what must go is removed, usually `Host` alone.
pub fn upstream_headers(incoming: &HeaderMap) -> HeaderMap {
    let named = connection_named(incoming);
    let mut headers = incoming.clone();
    for name in incoming.keys() {
        let dropped = is_hop_by_hop(name)
            || name == header::HOST
            || name == header::EXPECT
            || name.as_str().starts_with("x-toolstub-")
            || named.contains(name);
        if dropped {
            headers.remove(name);
        }
    }
    headers
}

/// Where the proxy picks the host by provider, a request carrying a
/// cloud's credentials (an AWS signature or session token, a Bedrock API
/// key) or calling a Vertex AI model goes to that cloud's hosts only: one
/// whose path names no host of it the proxy knows is refused, rather than
/// sent with them to another provider's default host (an OpenAI-flavoured
/// guess for a path it does not know).
pub fn stays_in_its_cloud(
    headers: &HeaderMap,
    client: &Uri,
    target: &Uri,
) -> Result<(), ProxyError> {
    let host = target.host().unwrap_or("");
    let path = client.path();
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let bearer = authorization
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map_or("", |(_, token)| token.trim_start());
    // A presigned URL carries its signature in the query.
    let presigned = client.query().is_some_and(|q| {
        q.split('&').any(|pair| {
            pair.starts_with("X-Amz-Signature=") || pair.starts_with("X-Amz-Security-Token=")
        })
    });
    let aws = super::aws::is_sigv4(authorization)
        || headers.contains_key("x-amz-security-token")
        || presigned
        || bearer.starts_with("ABSK")
        || bearer.starts_with("bedrock-api-key-");
    if aws && !super::aws::may_sign_for(host, &[]) {
        return Err(ProxyError::BadRequest(
            "this request carries AWS credentials, and its path names no AWS host toolstub knows; \
             set --upstream (or an upstream.routes entry) for it"
                .to_string(),
        ));
    }
    if crate::protocol::vertex::is_model_path(path) && !crate::protocol::vertex::is_host(host) {
        return Err(ProxyError::BadRequest(
            "this Vertex AI path names no location toolstub can map to a host \
             (it takes /v1/projects/P/locations/L/...); set --upstream for it"
                .to_string(),
        ));
    }
    Ok(())
}

/// The provider key toolstub holds for `flavor`'s API, added to a request
/// that carries no credential of its own (its client sent none, or a
/// client key in its place, taken off at the gate): only when the request
/// goes to that provider's own API host or a host listed for that key
/// (`upstream.openai_api_key_hosts`, ...), never anywhere else. Every
/// caller past the gate is authenticated (a client key, wrap's run secret,
/// or the local case), so lending is theirs to have.
pub fn lend_held_key(held: &HeldKeys, flavor: Flavor, uri: &http::Uri, headers: &mut HeaderMap) {
    let (key, own_host, listed, header) = match flavor {
        Flavor::OpenAi => (
            &held.openai,
            "api.openai.com",
            &held.openai_hosts,
            header::AUTHORIZATION,
        ),
        Flavor::Anthropic => (
            &held.anthropic,
            "api.anthropic.com",
            &held.anthropic_hosts,
            X_API_KEY,
        ),
        Flavor::Google => (
            &held.gemini,
            "generativelanguage.googleapis.com",
            &held.gemini_hosts,
            X_GOOG_API_KEY,
        ),
    };
    let Some(key) = key else { return };
    let carries_one = CREDENTIAL_HEADERS.iter().any(|h| headers.contains_key(h))
        || uri
            .query()
            .is_some_and(|q| q.split('&').any(|p| p.starts_with("key=")));
    let host = uri.host().unwrap_or("");
    let allowed =
        host.eq_ignore_ascii_case(own_host) || listed.iter().any(|h| h.eq_ignore_ascii_case(host));
    if carries_one || !allowed {
        return;
    }
    let value = match flavor {
        Flavor::OpenAi => HeaderValue::from_str(&format!("Bearer {}", key.expose())),
        _ => HeaderValue::from_str(key.expose()),
    };
    if let Ok(mut value) = value {
        value.set_sensitive(true);
        headers.insert(header, value);
    }
}

const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
const X_GOOG_API_KEY: HeaderName = HeaderName::from_static("x-goog-api-key");
/// The headers a provider credential comes in.
const CREDENTIAL_HEADERS: [HeaderName; 4] = [
    header::AUTHORIZATION,
    X_API_KEY,
    HeaderName::from_static("api-key"),
    X_GOOG_API_KEY,
];

/// Removes hop-by-hop headers, in place (also used for responses). Most
/// messages carry none: then nothing is removed (or hashed).
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named = connection_named(headers);
    if named.is_empty() && !headers.keys().any(is_hop_by_hop) {
        return;
    }
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// One of [`HOP_BY_HOP`].
fn is_hop_by_hop(name: &HeaderName) -> bool {
    name == header::CONNECTION
        || name == header::TE
        || name == header::TRAILER
        || name == header::TRANSFER_ENCODING
        || name == header::UPGRADE
        || name == header::PROXY_AUTHENTICATE
        || name == header::PROXY_AUTHORIZATION
        || name.as_str() == "keep-alive"
        || name.as_str() == "proxy-connection"
}

/// The headers a `Connection` header names (RFC 9110 7.6.1).
fn connection_named(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_header_leaves_out_the_default_port() {
        for (uri, host) in [
            ("https://api.example.com/x", "api.example.com"),
            ("https://api.example.com:443/x", "api.example.com"),
            ("http://127.0.0.1:8080/x", "127.0.0.1:8080"),
            ("http://h:80/", "h"),
            ("https://h:80/", "h:80"),
        ] {
            let uri: Uri = uri.parse().expect("uri");
            assert_eq!(host_value(&uri).expect("host"), host, "{uri}");
        }
    }

    #[test]
    fn hop_by_hop_host_and_own_headers_stay_here() {
        let mut h = HeaderMap::new();
        h.insert("host", "proxy".parse().expect("v"));
        h.insert("connection", "keep-alive, x-custom".parse().expect("v"));
        h.insert("x-custom", "1".parse().expect("v"));
        h.insert("x-toolstub-session", "s".parse().expect("v"));
        h.insert("authorization", "Bearer k".parse().expect("v"));
        h.insert("transfer-encoding", "chunked".parse().expect("v"));
        let out = upstream_headers(&h);
        let names: Vec<&str> = out.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["authorization"]);
    }

    /// Each provider at its own host (no single upstream), one route.
    fn by_provider() -> UpstreamConfig {
        UpstreamConfig {
            base_url: "https://example.com/api".parse().expect("uri"),
            anthropic_base: Some("https://anthropic.example".parse().expect("uri")),
            gemini_base: Some("https://gemini.example".parse().expect("uri")),
            connect_timeout: Duration::from_secs(1),
            first_byte_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
            ca_file: None,
            pool_idle_timeout: Duration::from_secs(1),
            pool_max_idle_per_host: 1,
            routes: vec![(
                "/anthropic".to_string(),
                "http://127.0.0.1:9".parse().expect("uri"),
            )],
            google_token_hosts: Vec::new(),
            aws_signing_hosts: Vec::new(),
            held_keys: crate::config::HeldKeys::default(),
        }
    }

    #[test]
    fn a_clouds_credentials_stay_in_its_cloud() {
        let mut up = Upstream::new(&by_provider()).expect("client");
        up.aws_region = Some("us-west-2".to_string());
        assert_eq!(
            up.uri_for("/inference-profiles?type=SYSTEM_DEFINED", Flavor::OpenAi)
                .expect("uri")
                .to_string(),
            "https://bedrock.us-west-2.amazonaws.com/inference-profiles?type=SYSTEM_DEFINED",
            "Claude Code's listing goes to Bedrock's control plane"
        );
        let openai: Uri = "https://api.openai.com/v1/models".parse().expect("uri");
        let bedrock: Uri = "https://bedrock.us-west-2.amazonaws.com/foundation-models"
            .parse()
            .expect("uri");
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (name, value) in pairs {
                h.insert(*name, HeaderValue::from_static(value));
            }
            h
        };
        let plain: Uri = "/v1/models".parse().expect("uri");
        for carried in [
            headers(&[("authorization", "Bearer ABSKQmVkcm9jaw")]),
            headers(&[("authorization", "bearer  ABSKQmVkcm9jaw")]),
            headers(&[("authorization", "Bearer bedrock-api-key-YmVkcm9jaw")]),
            headers(&[("authorization", "AWS4-HMAC-SHA256 Credential=AKID/x")]),
            headers(&[("x-amz-security-token", "IQoJb3JpZ2lu")]),
        ] {
            assert!(
                stays_in_its_cloud(&carried, &plain, &openai).is_err(),
                "{carried:?}"
            );
            assert!(stays_in_its_cloud(&carried, &plain, &bedrock).is_ok());
        }
        let presigned: Uri = "/v1/models?X-Amz-Signature=abc".parse().expect("uri");
        assert!(stays_in_its_cloud(&HeaderMap::new(), &presigned, &openai).is_err());
        let mine = headers(&[("authorization", "Bearer sk-proj-abc")]);
        assert!(stays_in_its_cloud(&mine, &plain, &openai).is_ok());
        let vertex: Uri = "/projects/p/locations/us/publishers/anthropic/models/m:rawPredict"
            .parse()
            .expect("uri");
        let anthropic: Uri = "https://api.anthropic.com/x".parse().expect("uri");
        assert!(stays_in_its_cloud(&HeaderMap::new(), &vertex, &anthropic).is_err());
    }

    #[test]
    fn upstream_uri_keeps_the_base_prefix() {
        let config = by_provider();
        let up = Upstream::new(&config).expect("client");
        assert_eq!(
            up.uri_for("/v1/chat/completions?x=1", Flavor::OpenAi)
                .expect("uri")
                .to_string(),
            "https://example.com/api/v1/chat/completions?x=1"
        );
        assert_eq!(
            up.uri_for("/anthropic/v1/messages?beta=true", Flavor::Anthropic)
                .expect("uri")
                .to_string(),
            "http://127.0.0.1:9/v1/messages?beta=true"
        );
        assert_eq!(
            up.uri_for("/anthropic", Flavor::OpenAi)
                .expect("uri")
                .to_string(),
            "http://127.0.0.1:9/"
        );
        assert_eq!(
            up.uri_for("/anthropicx/v1", Flavor::OpenAi)
                .expect("uri")
                .to_string(),
            "https://example.com/api/anthropicx/v1",
            "a prefix matches whole path segments only"
        );
        assert_eq!(
            up.uri_for("/v1/messages", Flavor::Anthropic)
                .expect("uri")
                .to_string(),
            "https://anthropic.example/v1/messages",
            "Anthropic requests go to Anthropic when no single upstream is set"
        );
        assert_eq!(
            up.uri_for(
                "/v1beta/models/gemini-3.1-pro-preview:streamGenerateContent?alt=sse",
                Flavor::Google
            )
            .expect("uri")
            .to_string(),
            "https://gemini.example/v1beta/models/gemini-3.1-pro-preview:streamGenerateContent?alt=sse",
            "Gemini requests go to Google when no single upstream is set"
        );
        assert_eq!(
            up.uri_for(
                "/v1/projects/p/locations/europe-west4/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
                Flavor::Google
            )
            .expect("uri")
            .to_string(),
            "https://europe-west4-aiplatform.googleapis.com/v1/projects/p/locations/europe-west4/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            "a Vertex AI path goes to the region it names"
        );
        // With a single upstream set, it goes there like every path.
        let single = Upstream::new(&UpstreamConfig {
            gemini_base: None,
            ..config.clone()
        })
        .expect("client");
        assert_eq!(
            single
                .uri_for("/v1/projects/p/locations/us-east5/publishers/google/models/m:generateContent", Flavor::Google)
                .expect("uri")
                .to_string(),
            "https://example.com/api/v1/projects/p/locations/us-east5/publishers/google/models/m:generateContent"
        );
    }
}
