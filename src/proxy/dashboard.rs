//! The dashboard: `GET /toolstub/`, one HTML page with its script and
//! style sheet under `/toolstub/assets/`, embedded in the binary
//! (`include_str!`, nothing fetched from elsewhere, nothing built at run
//! time). It is served wherever the operator API is (the proxy's listener,
//! or only `operator_api.listen` when that is set) and not at all when the
//! operator API is disabled.
//!
//! The page holds no data and needs no credential: the person signs in on
//! it (an API key, and the admin token when the server requires one), the
//! script keeps both in `sessionStorage` and sends them as headers on its
//! own `fetch` requests to `/toolstub/v1/`, which enforces the admin token
//! and scopes everything to the credential's tenant. Nothing secret is put
//! in a URL. Every answer here carries a strict Content-Security-Policy (no
//! inline script or style, requests to this origin only, no framing),
//! `Cache-Control: no-store` and `X-Content-Type-Options: nosniff`.
//!
//! Architecture invariant: this module serves fixed bytes; all data and all
//! tenant scoping stay with the operator API and the store.

use super::body::full;
use super::error::ProxyError;
use super::{App, BoxBody};
use crate::store::OutputMeta;
use crate::stub::{render, RecallToolNames, StubHeader};
use http::{header, HeaderValue, Method, Response, StatusCode};

/// The page's path.
pub(super) const PAGE: &str = "/toolstub/";
/// Where its other files are.
const ASSETS: &str = "/toolstub/assets/";

/// No inline script or style (the page has none), every request to this
/// origin only, no plugins, no framing, no forms posted anywhere.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

/// The embedded files: (name under `/toolstub/assets/`, content type, bytes).
const FILES: [(&str, &str, &str); 2] = [
    (
        "dashboard.js",
        "text/javascript; charset=utf-8",
        include_str!("dashboard/dashboard.js"),
    ),
    (
        "dashboard.css",
        "text/css; charset=utf-8",
        include_str!("dashboard/dashboard.css"),
    ),
];
const INDEX: &str = include_str!("dashboard/index.html");

/// Whether `path` is the dashboard's (`/toolstub`, `/toolstub/`, or under
/// `/toolstub/assets/`).
pub(super) fn serves(path: &str) -> bool {
    path == "/toolstub" || path == PAGE || path.starts_with(ASSETS)
}

/// Answers a dashboard path (see [`serves`]); GET and HEAD only.
pub(super) fn handle(
    app: &App,
    method: &Method,
    path: &str,
) -> Result<Response<BoxBody>, ProxyError> {
    if !app.config.operator_api.enabled {
        return Err(ProxyError::NotFound(
            "the dashboard is disabled with the operator API (operator_api.enabled = false)"
                .to_string(),
        ));
    }
    if method != Method::GET && method != Method::HEAD {
        return Err(ProxyError::MethodNotAllowed(method.to_string()));
    }
    let head = method == Method::HEAD;
    if path == "/toolstub" {
        let mut response = page(StatusCode::PERMANENT_REDIRECT, "text/plain", "", head);
        response
            .headers_mut()
            .insert(header::LOCATION, HeaderValue::from_static(PAGE));
        return Ok(response);
    }
    if path == PAGE {
        return Ok(page(
            StatusCode::OK,
            "text/html; charset=utf-8",
            INDEX,
            head,
        ));
    }
    let name = path.strip_prefix(ASSETS).unwrap_or_default();
    match FILES.iter().find(|(n, _, _)| *n == name) {
        Some((_, content_type, bytes)) => Ok(page(StatusCode::OK, content_type, bytes, head)),
        None => Err(ProxyError::NotFound(format!(
            "no dashboard file at {path}; the dashboard is at {PAGE}"
        ))),
    }
}

/// The stub of a stored output exactly as the rewrite rendered it: its
/// synopsis and header fields as stored (the header shows min(original,
/// preview budget), which is the stored `preview_chars`), with the reason
/// and recall tool names the rewrite used. `None` when those are unknown.
pub(super) fn stub_of(result_ref: &str, meta: &OutputMeta) -> Option<String> {
    let facts = meta.stub.as_ref()?;
    let [read, search, list] = facts.tools.clone();
    let header = StubHeader {
        tool_name: meta.tool_name.as_deref(),
        original_chars: usize::try_from(meta.original_chars).ok()?,
        preview_budget: usize::try_from(meta.preview_chars).ok()?,
        result_ref: Some(result_ref),
        sha256: Some(&meta.sha256),
        reason: Some(&facts.reason),
    };
    Some(render(
        &meta.synopsis,
        &header,
        &RecallToolNames { read, search, list },
    ))
}

fn page(
    status: StatusCode,
    content_type: &'static str,
    body: &'static str,
    head: bool,
) -> Response<BoxBody> {
    let length = body.len();
    let mut response = Response::new(full(if head { "" } else { body }));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_the_dashboards() {
        for p in [
            "/toolstub",
            "/toolstub/",
            "/toolstub/assets/dashboard.js",
            "/toolstub/assets/x",
        ] {
            assert!(serves(p), "{p}");
        }
        for p in [
            "/toolstub/v1/results",
            "/toolstub/index.html",
            "/toolstubx",
            "/",
        ] {
            assert!(!serves(p), "{p}");
        }
    }

    #[test]
    fn the_page_loads_only_its_own_files_and_has_no_inline_code() {
        // Every script and style sheet the page names is embedded here.
        for (name, _, _) in FILES {
            assert!(INDEX.contains(&format!("assets/{name}")), "{name}");
        }
        // No inline script (the CSP would block it) and no inline style.
        assert_eq!(INDEX.matches("<script").count(), 1, "one script, by src");
        assert!(INDEX.contains("<script src=\"assets/dashboard.js\""));
        assert!(!INDEX.contains("<style"));
        assert!(!INDEX.contains(" style="));
        let handler = INDEX.split(" on").skip(1).find(|rest| {
            let name: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
            !name.is_empty() && rest[name.len()..].starts_with('=')
        });
        assert_eq!(handler, None, "no inline event handlers");
        // Nothing from another origin (the SVG namespace is a name, not a fetch).
        let svg = "http://www.w3.org/2000/svg";
        for text in [INDEX, &FILES[0].2.replace(svg, ""), FILES[1].2] {
            assert!(!text.contains("http://") && !text.contains("https://"));
        }
        // Credentials live in sessionStorage only, never localStorage.
        assert!(!FILES[0].2.contains("localStorage"));
    }
}
