//! The operator API under `/toolstub/v1/`: list, read,
//! search within a ref, and session-wide search, as JSON. The tenant comes
//! from the request's credential exactly as on the proxied API, so another
//! tenant's ref answers 404 exactly like a missing one.
//!
//! Endpoints (GET only; any other method on them is 405 with `Allow: GET`):
//!
//! - `results?session=&tool_name=&limit=` (limit default 50): the tenant's
//!   live outputs, newest first, filters applied before the limit. Without
//!   `session` the list spans all the tenant's sessions.
//! - `results/{ref}?offset=&limit=` (0, 20000; `limit=-1` reads to the end):
//!   a window of the original plus its metadata (with `original_tokens` and
//!   `stub_tokens` once counted, else null), the stub the model saw among
//!   it (`metadata.stub`; `null` when the store does not know how it was
//!   rendered, as for outputs stored before it kept that).
//! - `results/{ref}/search?q=&limit=&context_chars=` (20, 300): exact,
//!   case-sensitive matches in one original.
//! - `search?q=&session=&limit=&context_chars=` (20, 300): ranked search
//!   across one session; `session` is required, because ranked search is
//!   scoped to a session and the store has no wider one.
//! - `stats?session=&bucket_ms=&sessions=` (all sessions, 60000, 50): the
//!   token ledger summed: `totals`, `pricing` (null without a `[[pricing]]`
//!   table), `by_tool`, `by_kind`, `series` (points of `bucket_ms`, oldest
//!   first, the newest 500), `sessions` (most recently active first).
//!
//! Offsets, limits and lengths count Unicode code points. `created_at` is
//! Unix milliseconds. A list or search `limit` of -1 means "no limit".
//!
//! Errors are OpenAI-format bodies: invalid arguments (not a number, a
//! negative value other than -1, an empty `q`, a malformed ref or escape, a
//! known parameter given twice) are 400; an unknown or another tenant's ref
//! is 404 with the same message form; an expired ref is 410 Gone with code
//! `expired`; a path that is no endpoint is 404. Unknown query parameters
//! are ignored; an empty value counts as absent (`?session=&limit=` is the
//! same as no parameters), except `q`, which must not be empty.
//!
//! Configuration: with `operator_api.enabled = false` every `/toolstub/v1/`
//! path answers 404 saying the API is disabled (never forwarded upstream,
//! so the namespace stays toolstub's). With `operator_api.admin_token` set,
//! each request must also carry `x-toolstub-admin-token: <token>` (compared
//! in constant time), else 401. The token is checked before the path is
//! resolved, so an unauthenticated client learns nothing about endpoints.
//!
//! Architecture invariant: this module only parses HTTP and serializes
//! store values; every query and all tenant scoping are the store's.

use super::body::full;
use super::error::ProxyError;
use super::{App, BoxBody};
use crate::recall::execute::{Hits, Results};
use crate::refs::looks_like_ref;
use crate::store::{ReportQuery, StoreError, Tenant, OFFSET_UNIT};
use crate::synopsis::{Kind, Synopsis};
use http::{header, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde::Serialize;
use std::sync::Arc;

/// Every operator path starts with this.
const PREFIX: &str = "/toolstub/v1/";
/// Defaults, as for the recall tools.
const LIST_LIMIT: i64 = 50;
const READ_LIMIT: i64 = 20_000;
const SEARCH_LIMIT: i64 = 20;
const CONTEXT_CHARS: i64 = 300;

pub(super) async fn handle(
    app: &Arc<App>,
    tenant: Tenant,
    req: Request<Incoming>,
) -> Result<Response<BoxBody>, ProxyError> {
    let (parts, _body) = req.into_parts();
    let settings = &app.config.operator_api;
    if !settings.enabled {
        return Err(ProxyError::NotFound(
            "the operator API is disabled on this toolstub (operator_api.enabled = false)"
                .to_string(),
        ));
    }
    if !super::access::admin_token_ok(settings.admin_token.as_ref(), &parts.headers) {
        return Err(ProxyError::Unauthorized);
    }
    let endpoint = Endpoint::parse(parts.uri.path())?;
    if parts.method != Method::GET {
        return Err(ProxyError::MethodNotAllowed(parts.method.to_string()));
    }
    let query = Query::parse(parts.uri.query())?;
    match endpoint {
        Endpoint::List => list(app, &tenant, &query).await,
        Endpoint::Read(r) => read(app, &tenant, &r, &query).await,
        Endpoint::SearchRef(r) => search_ref(app, &tenant, &r, &query).await,
        Endpoint::Search => search_session(app, &tenant, &query).await,
        Endpoint::Stats => stats(app, &tenant, &query).await,
    }
}

/// Which endpoint a path names; refs are percent-decoded and checked.
#[derive(Debug, PartialEq, Eq)]
enum Endpoint {
    List,
    Read(String),
    SearchRef(String),
    Search,
    Stats,
}

impl Endpoint {
    fn parse(path: &str) -> Result<Endpoint, ProxyError> {
        let unknown = || {
            ProxyError::NotFound(format!(
                "no operator endpoint at {path}; the endpoints are {PREFIX}results, \
                 {PREFIX}results/{{ref}}, {PREFIX}results/{{ref}}/search, {PREFIX}search and {PREFIX}stats"
            ))
        };
        let rest = path.strip_prefix(PREFIX).ok_or_else(unknown)?;
        let segments: Vec<&str> = rest.split('/').collect();
        match segments.as_slice() {
            ["results"] => Ok(Endpoint::List),
            ["search"] => Ok(Endpoint::Search),
            ["stats"] => Ok(Endpoint::Stats),
            ["results", r] if !r.is_empty() => Ok(Endpoint::Read(parse_ref(r)?)),
            ["results", r, "search"] if !r.is_empty() => Ok(Endpoint::SearchRef(parse_ref(r)?)),
            _ => Err(unknown()),
        }
    }
}

fn parse_ref(segment: &str) -> Result<String, ProxyError> {
    let r = percent_decode(segment, false)?;
    if looks_like_ref(&r) {
        Ok(r)
    } else {
        Err(ProxyError::BadRequest(format!(
            "{r:?} is not a ref: a ref is tr_ followed by letters, digits, '_' or '-'"
        )))
    }
}

/// The decoded query string. Unknown parameters are kept but never looked at.
#[derive(Debug, Default)]
struct Query(Vec<(String, String)>);

impl Query {
    /// `application/x-www-form-urlencoded`: pairs split on `&`, key and value
    /// on the first `=`, `+` is a space, `%XX` a byte; the result must be
    /// UTF-8. A malformed escape is a 400, not silently kept.
    fn parse(raw: Option<&str>) -> Result<Query, ProxyError> {
        let mut pairs = Vec::new();
        for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            pairs.push((percent_decode(k, true)?, percent_decode(v, true)?));
        }
        Ok(Query(pairs))
    }

    /// The value of `name`; an empty value counts as absent, and a name
    /// given twice is a 400 (which one was meant is unclear).
    fn get(&self, name: &str) -> Result<Option<&str>, ProxyError> {
        let mut values = self.0.iter().filter(|(k, _)| k == name).map(|(_, v)| v);
        let first = values.next();
        if values.next().is_some() {
            return Err(ProxyError::BadRequest(format!(
                "query parameter `{name}` is given more than once"
            )));
        }
        Ok(first.map(String::as_str).filter(|v| !v.is_empty()))
    }

    fn int(&self, name: &str, default: i64) -> Result<i64, ProxyError> {
        match self.get(name)? {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| {
                ProxyError::BadRequest(format!("`{name}` must be an integer, got {v:?}"))
            }),
        }
    }

    /// 0 or more.
    fn non_negative(&self, name: &str, default: i64) -> Result<u64, ProxyError> {
        let n = self.int(name, default)?;
        u64::try_from(n)
            .map_err(|_| ProxyError::BadRequest(format!("`{name}` must be 0 or more, got {n}")))
    }

    /// A count: 0 or more, or -1 for "no limit".
    fn count(&self, name: &str, default: i64) -> Result<usize, ProxyError> {
        match self.int(name, default)? {
            -1 => Ok(usize::MAX),
            n => usize::try_from(n).map_err(|_| {
                ProxyError::BadRequest(format!(
                    "`{name}` must be -1 (no limit) or 0 or more, got {n}"
                ))
            }),
        }
    }

    /// A required, non-empty search query.
    fn q(&self) -> Result<&str, ProxyError> {
        self.get("q")?.ok_or_else(|| {
            ProxyError::BadRequest("`q` (the text to search for) is required".to_string())
        })
    }
}

fn percent_decode(s: &str, plus_is_space: bool) -> Result<String, ProxyError> {
    crate::percent::decode(s, plus_is_space).ok_or_else(|| {
        ProxyError::BadRequest(format!(
            "malformed percent-escape in {s:?}, or not UTF-8 once decoded"
        ))
    })
}

/// Store failures as HTTP: the caller's mistakes keep their meaning, the
/// store's own failures are 500s and counted.
fn store_failure(app: &App, operation: &'static str, e: StoreError) -> ProxyError {
    match e {
        StoreError::NotFound { .. } => ProxyError::NotFound(e.to_string()),
        StoreError::Expired { .. } => ProxyError::Expired(e.to_string()),
        StoreError::InvalidArgument(_) => ProxyError::BadRequest(e.to_string()),
        _ => {
            app.metrics.store_error(operation);
            ProxyError::Internal(format!("the store failed: {e}"))
        }
    }
}

fn json<T: Serialize>(value: &T) -> Result<Response<BoxBody>, ProxyError> {
    let body = serde_json::to_vec(value)
        .map_err(|e| ProxyError::Internal(format!("encoding the response: {e}")))?;
    let mut response = Response::new(full(body));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    Ok(response)
}

// The wire format, field order as documented (serde keeps declaration order).

#[derive(Serialize)]
struct ReadResponse<'a> {
    #[serde(rename = "ref")]
    result_ref: &'a str,
    content: &'a str,
    offset: u64,
    limit: i64,
    total_chars: u64,
    has_more: bool,
    next_offset: Option<u64>,
    offset_unit: &'static str,
    metadata: Metadata<'a>,
}

#[derive(Serialize)]
struct Metadata<'a> {
    session_id: &'a str,
    tool_call_id: Option<&'a str>,
    tool_name: Option<&'a str>,
    created_at: i64,
    original_chars: u64,
    preview_chars: u64,
    sha256: &'a str,
    mime_type: Option<&'a str>,
    synopsis_kind: Kind,
    synopsis: &'a Synopsis,
    original_tokens: Option<u64>,
    stub_tokens: Option<u64>,
    /// The stub the model saw, rendered again from the stored synopsis and
    /// metadata; `null` when the store does not know how it was rendered.
    stub: Option<String>,
}

#[derive(Serialize)]
struct RefSearchResponse<'a> {
    #[serde(rename = "ref")]
    result_ref: &'a str,
    matches: Vec<MatchItem<'a>>,
}

#[derive(Serialize)]
struct MatchItem<'a> {
    offset: u64,
    snippet: &'a str,
}

/// `GET stats`: the tenant's ledger, summed (see [`StatsResponse`]).
async fn stats(app: &App, tenant: &Tenant, query: &Query) -> Result<Response<BoxBody>, ProxyError> {
    let report_query = ReportQuery {
        session: query.get("session")?.map(str::to_string),
        bucket_ms: query.int("bucket_ms", 60_000)?.max(1),
        sessions: query.count("sessions", 50)?,
    };
    let report = app
        .store
        .report(Some(tenant), report_query)
        .await
        .map_err(|e| store_failure(app, "report", e))?;
    json(&crate::stats::StatsResponse::of(
        &report,
        &app.config.pricing,
    ))
}

async fn list(app: &App, tenant: &Tenant, query: &Query) -> Result<Response<BoxBody>, ProxyError> {
    let session = query.get("session")?;
    let tool_name = query.get("tool_name")?;
    let limit = query.count("limit", LIST_LIMIT)?;
    let rows = app
        .store
        .list(tenant, session, tool_name, limit)
        .await
        .map_err(|e| store_failure(app, "operator_list", e))?;
    // The store's rows are the wire format (`crate::store::OutputSummary`).
    json(&Results { results: rows })
}

async fn read(
    app: &App,
    tenant: &Tenant,
    result_ref: &str,
    query: &Query,
) -> Result<Response<BoxBody>, ProxyError> {
    let offset = query.int("offset", 0)?;
    let limit = query.int("limit", READ_LIMIT)?;
    if offset < 0 {
        return Err(ProxyError::BadRequest(format!(
            "`offset` must be 0 or more, got {offset}"
        )));
    }
    if limit < -1 {
        return Err(ProxyError::BadRequest(format!(
            "`limit` must be -1 (to the end) or 0 or more, got {limit}"
        )));
    }
    let (window, meta) = tokio::try_join!(
        app.store.read(tenant, result_ref, offset, limit),
        app.store.meta(tenant, result_ref),
    )
    .map_err(|e| store_failure(app, "operator_read", e))?;
    json(&ReadResponse {
        result_ref,
        content: &window.content,
        offset: window.offset,
        limit: window.limit,
        total_chars: window.total_chars,
        has_more: window.has_more,
        next_offset: window.next_offset,
        offset_unit: OFFSET_UNIT,
        metadata: Metadata {
            session_id: &meta.session_id,
            tool_call_id: meta.tool_call_id.as_deref(),
            tool_name: meta.tool_name.as_deref(),
            created_at: meta.created_at,
            original_chars: meta.original_chars,
            preview_chars: meta.preview_chars,
            sha256: &meta.sha256,
            mime_type: meta.mime_type.as_deref(),
            synopsis_kind: meta.synopsis_kind,
            synopsis: &meta.synopsis,
            original_tokens: meta.original_tokens,
            stub_tokens: meta.stub_tokens,
            stub: super::dashboard::stub_of(result_ref, &meta),
        },
    })
}

async fn search_ref(
    app: &App,
    tenant: &Tenant,
    result_ref: &str,
    query: &Query,
) -> Result<Response<BoxBody>, ProxyError> {
    let q = query.q()?;
    let limit = query.count("limit", SEARCH_LIMIT)?;
    let context =
        usize::try_from(query.non_negative("context_chars", CONTEXT_CHARS)?).unwrap_or(usize::MAX);
    let found = app
        .store
        .search(tenant, result_ref, q, limit, context)
        .await
        .map_err(|e| store_failure(app, "operator_search_ref", e))?;
    json(&RefSearchResponse {
        result_ref: &found.result_ref,
        matches: found
            .matches
            .iter()
            .map(|m| MatchItem {
                offset: m.offset,
                snippet: &m.snippet,
            })
            .collect(),
    })
}

async fn search_session(
    app: &App,
    tenant: &Tenant,
    query: &Query,
) -> Result<Response<BoxBody>, ProxyError> {
    let q = query.q()?;
    let Some(session) = query.get("session")? else {
        return Err(ProxyError::BadRequest(
            "`session` is required: ranked search covers one session; \
             GET /toolstub/v1/results lists outputs with their session_id"
                .to_string(),
        ));
    };
    let limit = query.count("limit", SEARCH_LIMIT)?;
    let context =
        usize::try_from(query.non_negative("context_chars", CONTEXT_CHARS)?).unwrap_or(usize::MAX);
    // The store's ranked search sees every committed output (each backend
    // makes sure of it; see `Store::search_session`).
    let hits = app
        .store
        .search_session(tenant, session, q, limit, context)
        .await
        .map_err(|e| store_failure(app, "operator_search", e))?;
    // The store's hits are the wire format (`crate::store::SearchHit`).
    json(&Hits { hits })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(r: Result<impl std::fmt::Debug, ProxyError>) -> String {
        match r {
            Err(ProxyError::BadRequest(m)) => m,
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn paths_name_endpoints() {
        let ok = |p: &str| Endpoint::parse(p).expect(p);
        assert_eq!(ok("/toolstub/v1/results"), Endpoint::List);
        assert_eq!(ok("/toolstub/v1/search"), Endpoint::Search);
        assert_eq!(
            ok("/toolstub/v1/results/tr_call_1_00ff"),
            Endpoint::Read("tr_call_1_00ff".to_string())
        );
        assert_eq!(
            ok("/toolstub/v1/results/tr_%61b/search"),
            Endpoint::SearchRef("tr_ab".to_string())
        );
        for p in [
            "/toolstub/v1/",
            "/toolstub/v1/results/",
            "/toolstub/v1/results//search",
            "/toolstub/v1/results/tr_a/read",
            "/toolstub/v1/search/x",
            "/toolstub/v1/nope",
        ] {
            match Endpoint::parse(p) {
                Err(ProxyError::NotFound(m)) => assert!(m.contains(p), "{m}"),
                other => panic!("{p}: {other:?}"),
            }
        }
        for p in [
            "/toolstub/v1/results/xyz",
            "/toolstub/v1/results/tr_",
            "/toolstub/v1/results/tr_a%20b",
            "/toolstub/v1/results/tr_%zz",
        ] {
            bad(Endpoint::parse(p));
        }
    }

    #[test]
    fn query_strings_decode() {
        let q = Query::parse(Some("q=a+b%2Bc%20%E2%9C%93&x&&session=&limit=5&junk=%41"))
            .expect("parses");
        assert_eq!(q.get("q").expect("once"), Some("a b+c \u{2713}"));
        assert_eq!(q.get("session").expect("once"), None, "empty is absent");
        assert_eq!(q.get("x").expect("once"), None);
        assert_eq!(q.count("limit", 50).expect("count"), 5);
        assert_eq!(q.count("missing", 50).expect("default"), 50);
        bad(Query::parse(Some("q=%")));
        bad(Query::parse(Some("q=%4")));
        bad(Query::parse(Some("q=%ff")));
        let twice = Query::parse(Some("limit=1&limit=2")).expect("parses");
        assert!(bad(twice.get("limit")).contains("more than once"));
        assert!(Query::parse(None).expect("empty").0.is_empty());
    }

    #[test]
    fn numbers_are_checked() {
        let q = |s: &str| Query::parse(Some(s)).expect("parses");
        assert_eq!(
            q("limit=-1").count("limit", 5).expect("no limit"),
            usize::MAX
        );
        assert!(bad(q("limit=-2").count("limit", 5)).contains("-1"));
        assert!(bad(q("limit=ten").count("limit", 5)).contains("integer"));
        assert!(bad(q("limit=1.5").count("limit", 5)).contains("integer"));
        assert!(bad(q("context_chars=-1").non_negative("context_chars", 3)).contains("0 or more"));
        assert_eq!(q("offset=%2B7").int("offset", 0).expect("int"), 7);
        assert!(
            bad(q("offset=+7").int("offset", 0)).contains("\" 7\""),
            "+ is a space"
        );
        assert!(bad(q("q=").q()).contains("required"));
    }
}
