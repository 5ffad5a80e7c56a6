//! Vertex AI: Google Cloud's hosting of the Gemini API's and Anthropic
//! Messages' endpoints, at `/v1/projects/{p}/locations/{l}/publishers/
//! {google|anthropic}/models/{m}:{method}` (or `/v1beta1/...`), served from
//! the host of the location the path names. What the proxy needs of it:
//! where such a path goes when no single upstream is set, and which hosts
//! are Vertex AI's (the only ones a Google token of the operator's goes
//! to).

/// The host a Vertex AI path is served from, when it names a plain
/// location.
pub fn host_of_path(path: &str) -> Option<String> {
    location(path).map(host)
}

/// The location of a Vertex AI path, when it is a plain region name
/// (letters, digits, `-`): the host Vertex AI serves it from is built of
/// it, so anything else (a dot, a slash, an encoded one) is refused.
pub fn location(path: &str) -> Option<&str> {
    let rest = path
        .strip_prefix("/v1/")
        .or_else(|| path.strip_prefix("/v1beta1/"))?;
    let mut segments = rest.splitn(5, '/');
    let (Some("projects"), Some(project), Some("locations"), Some(location), Some(_)) = (
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
    ) else {
        return None;
    };
    let plain = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    (!project.is_empty() && plain(location)).then_some(location)
}

/// Vertex AI's host for a location: `{location}-aiplatform.googleapis.com`,
/// `aiplatform.googleapis.com` for `global`, and the multi-regions `us` and
/// `eu` at `aiplatform.{us|eu}.rep.googleapis.com` (as Claude Code and
/// Google's SDKs map them).
pub fn host(location: &str) -> String {
    match location {
        "global" => "aiplatform.googleapis.com".to_string(),
        "us" | "eu" => format!("aiplatform.{location}.rep.googleapis.com"),
        _ => format!("{location}-aiplatform.googleapis.com"),
    }
}

/// Whether `host` is Vertex AI's (`aiplatform.googleapis.com`, a
/// multi-region's `aiplatform.{us|eu}.rep.googleapis.com` or a region's
/// `{region}-aiplatform.googleapis.com`).
pub fn is_host(host: &str) -> bool {
    matches!(
        host,
        "aiplatform.googleapis.com"
            | "aiplatform.us.rep.googleapis.com"
            | "aiplatform.eu.rep.googleapis.com"
    ) || host
        .strip_suffix("-aiplatform.googleapis.com")
        .is_some_and(|region| {
            !region.is_empty()
                && region
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// Whether `path` is a call on a publisher's model (`.../locations/{l}/
/// publishers/...`): a request Google authenticates with a bearer token.
pub fn is_model_path(path: &str) -> bool {
    path.contains("/locations/") && path.contains("/publishers/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_names_its_location_and_host() {
        for (path, location) in [
            (
                "/v1/projects/p-1/locations/us-central1/publishers/google/models/m:generateContent",
                Some("us-central1"),
            ),
            (
                "/v1beta1/projects/p/locations/global/publishers/google/models/m:countTokens",
                Some("global"),
            ),
            (
                "/v1/projects/p/locations/evil.example.com%2F/publishers/google/models/m:x",
                None,
            ),
            (
                "/v1/projects/p/locations/EU/publishers/google/models/m:x",
                None,
            ),
            (
                "/v1/projects//locations/us/publishers/google/models/m:x",
                None,
            ),
            ("/v1beta/models/m:generateContent", None),
            ("/v1/projects/p/locations/us", None),
        ] {
            assert_eq!(super::location(path), location, "{path}");
        }
        assert_eq!(
            host("europe-west4"),
            "europe-west4-aiplatform.googleapis.com"
        );
        assert_eq!(host("global"), "aiplatform.googleapis.com");
        assert_eq!(host("us"), "aiplatform.us.rep.googleapis.com");
        assert_eq!(host("eu"), "aiplatform.eu.rep.googleapis.com");
        assert!(is_host(&host("us")) && is_host(&host("eu")));
        assert_eq!(
            host_of_path(
                "/v1/projects/p/locations/us-east5/publishers/anthropic/models/c:rawPredict"
            )
            .as_deref(),
            Some("us-east5-aiplatform.googleapis.com")
        );
    }

    #[test]
    fn only_googles_hosts_are_vertex_hosts() {
        assert!(is_host("aiplatform.googleapis.com"));
        assert!(is_host("us-central1-aiplatform.googleapis.com"));
        for other in [
            "-aiplatform.googleapis.com",
            "evil.com-aiplatform.googleapis.com",
            "aiplatform.googleapis.com.evil.example",
            "US-aiplatform.googleapis.com",
            "aiplatform.asia.rep.googleapis.com",
            "gateway.internal",
        ] {
            assert!(!is_host(other), "{other}");
        }
    }
}
