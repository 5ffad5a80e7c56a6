//! The Gemini API's paths (`generativelanguage.googleapis.com`, and Vertex
//! AI's Gemini paths), by which a request with no single upstream set goes
//! to Google, and its error statuses.

/// The methods of a Gemini model resource (`.../models/{model}:{method}`).
const MODEL_METHODS: [&str; 6] = [
    "generateContent",
    "streamGenerateContent",
    "countTokens",
    "embedContent",
    "batchEmbedContents",
    "batchGenerateContent",
];

/// Whether `path` (without its query) is a Gemini API path: anything under
/// `/v1beta/` or `/v1alpha/` (Google AI's versions; OpenAI and Anthropic
/// use neither), or a model method under `/v1/` (`/v1/models/{m}:method`,
/// and Vertex AI's `/v1/projects/{p}/locations/{l}/publishers/google/models/{m}:method`).
pub fn is_path(path: &str) -> bool {
    if path.starts_with("/v1beta/") || path.starts_with("/v1alpha/") {
        return true;
    }
    let Some(rest) = path.strip_prefix("/v1/") else {
        return false;
    };
    let Some(model) = rest.strip_prefix("models/").or_else(|| vertex_model(rest)) else {
        return false;
    };
    model.rsplit_once(':').is_some_and(|(name, method)| {
        !name.is_empty() && !name.contains('/') && MODEL_METHODS.contains(&method)
    })
}

/// The model a Gemini request names in its path (`.../models/{model}:method`,
/// under any prefix), percent-decoding left alone: the body names none.
pub fn model_in_path(path: &str) -> Option<&str> {
    let (_, tail) = path.rsplit_once("/models/")?;
    let (model, _) = tail.split_once(':')?;
    (!model.is_empty() && !model.contains('/')).then_some(model)
}

/// After `/v1/`: `projects/{p}/locations/{l}/publishers/google/models/`,
/// then the model.
fn vertex_model(rest: &str) -> Option<&str> {
    let mut segments = rest.splitn(7, '/');
    let fixed = [
        Some("projects"),
        None,
        Some("locations"),
        None,
        Some("publishers"),
        Some("google"),
    ];
    for want in fixed {
        let segment = segments.next()?;
        if segment.is_empty() || want.is_some_and(|w| w != segment) {
            return None;
        }
    }
    segments.next()?.strip_prefix("models/")
}

/// Google's canonical status name of an HTTP status, as its errors carry
/// it (`error.status`).
pub fn status_name(status: u16) -> &'static str {
    match status {
        400 | 413 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        502 | 503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        400..=499 => "FAILED_PRECONDITION",
        _ => "INTERNAL",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_is_read_from_the_path() {
        for (path, model) in [
            ("/v1beta/models/gemini-2.5-pro:streamGenerateContent", Some("gemini-2.5-pro")),
            ("/wrap/gemini/v1beta/models/gemini-3-pro-preview:generateContent", Some("gemini-3-pro-preview")),
            (
                "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash:countTokens",
                Some("gemini-2.5-flash"),
            ),
            ("/v1beta/models/:generateContent", None),
            ("/v1beta/models", None),
            ("/v1/chat/completions", None),
        ] {
            assert_eq!(model_in_path(path), model, "{path}");
        }
    }

    #[test]
    fn gemini_paths_are_known_from_the_others() {
        for path in [
            "/v1beta/models/gemini-3.1-pro-preview:streamGenerateContent",
            "/v1beta/models/gemini-3.5-flash-lite:generateContent",
            "/v1beta/models",
            "/v1alpha/models/m:countTokens",
            "/v1/models/gemini-2.5-pro:generateContent",
            "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:streamGenerateContent",
        ] {
            assert!(is_path(path), "{path}");
        }
        for path in [
            "/v1/chat/completions",
            "/v1/messages",
            "/v1/models",
            "/v1/models/gpt-5",
            "/v1/responses",
            "/v1/models/a/b:generateContent",
            "/v1/models/:generateContent",
            "/v1/models/m:rawPredict",
            "/v1/projects/p/locations/l/publishers/anthropic/models/claude:rawPredict",
            "/v1/projects/p/locations/l/publishers/google/models/m:rawPredict",
            "/v1/projects//locations/l/publishers/google/models/m:generateContent",
            "/wrap/v1beta/models/m:generateContent",
        ] {
            assert!(!is_path(path), "{path}");
        }
    }

    #[test]
    fn statuses_have_googles_names() {
        assert_eq!(status_name(400), "INVALID_ARGUMENT");
        assert_eq!(status_name(502), "UNAVAILABLE");
        assert_eq!(status_name(500), "INTERNAL");
        assert_eq!(status_name(418), "FAILED_PRECONDITION");
    }
}
