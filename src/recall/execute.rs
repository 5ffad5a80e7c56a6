//! Answering one recall call from the store. The result is always a JSON
//! text for the model: the data asked for, or `{"error": ...}` saying what
//! was wrong (bad arguments, unknown ref, expired ref) so the model can go on.

use super::{RecallCall, RecallTool};
use crate::store::{AsyncResultStore, StoreError, Tenant};
use serde::{Deserialize, Serialize};

/// A list's answer, the model's and the operator API's alike:
/// `{"results": [...]}`.
#[derive(Serialize)]
pub(crate) struct Results<T> {
    pub results: T,
}

/// A ranked search's answer, the model's and the operator API's alike:
/// `{"hits": [...]}`.
#[derive(Serialize)]
pub(crate) struct Hits<T> {
    pub hits: T,
}

/// Where a recall call may look: one tenant's outputs, one session for
/// `list` and ref-less search.
pub struct RecallScope<'a> {
    pub store: &'a AsyncResultStore,
    pub tenant: &'a Tenant,
    pub session: &'a str,
}

const DEFAULT_READ_LIMIT: i64 = 20_000;
const DEFAULT_SEARCH_LIMIT: usize = 20;
const DEFAULT_CONTEXT_CHARS: usize = 300;
const DEFAULT_LIST_LIMIT: usize = 50;
/// Caps on what a model may ask for in one call.
const MAX_SEARCH_LIMIT: usize = 200;
const MAX_CONTEXT_CHARS: usize = 5_000;
const MAX_LIST_LIMIT: usize = 500;
/// The most characters one read returns, whatever its `limit` (`-1`, "to
/// the end", included); `has_more` and `next_offset` say where the rest
/// is. A result goes back upstream in every later round's body and is held
/// until the answer ends: uncapped, a read of a 64 MB output held it two
/// or three times over and sent it to a model whose window it overflows.
const MAX_READ_CHARS: i64 = 100_000;
/// The most context one search shows over all its hits (`limit` times both
/// sides): at the caps above it came to 2 million characters.
const MAX_SEARCH_CONTEXT_CHARS: usize = 100_000;
/// What one round's results may come to, in bytes. A call made after its
/// round's results reached it is answered with an error asking for it in
/// the next round, so a round of many large reads stays bounded (at most
/// this plus one read's result).
pub const ROUND_RESULT_BYTES: usize = 400_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    #[serde(rename = "ref", deserialize_with = "a_ref")]
    result_ref: String,
    #[serde(default, deserialize_with = "integer")]
    offset: Option<i64>,
    #[serde(default, deserialize_with = "integer")]
    limit: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    #[serde(rename = "ref", default, deserialize_with = "optional_ref")]
    result_ref: Option<String>,
    query: String,
    #[serde(default, deserialize_with = "integer")]
    limit: Option<i64>,
    #[serde(default, deserialize_with = "integer")]
    context_chars: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    tool_name: Option<String>,
    #[serde(default, deserialize_with = "integer")]
    limit: Option<i64>,
}

/// A ref as models copy it: trimmed, and without the `ref=` or `ref:` a
/// stub's wording may lead them to copy with it.
fn a_ref<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let raw = String::deserialize(d)?;
    let trimmed = raw.trim();
    let bare = ["ref=", "ref:"]
        .iter()
        .find_map(|p| trimmed.strip_prefix(p))
        .unwrap_or(trimmed);
    Ok(bare.trim().to_string())
}

fn optional_ref<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    struct Ref(#[serde(deserialize_with = "a_ref")] String);
    Ok(Option::<Ref>::deserialize(d)?.map(|r| r.0))
}

/// An integer argument as models send it: a number (`100`, or `100.0`), or
/// a string of one (`"100"`); null is absent.
fn integer<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    use serde::de::Error;
    let value = Option::<serde_json::Value>::deserialize(d)?;
    let number = match &value {
        None | Some(serde_json::Value::Null) => return Ok(None),
        Some(serde_json::Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)),
        Some(serde_json::Value::String(s)) => s.trim().parse().ok(),
        Some(_) => None,
    };
    number.map(Some).ok_or_else(|| {
        D::Error::custom(format!(
            "expected an integer, got {}",
            value.unwrap_or_default()
        ))
    })
}

#[derive(Serialize)]
struct ReadResult<'a> {
    #[serde(rename = "ref")]
    result_ref: &'a str,
    content: String,
    offset: u64,
    total_chars: u64,
    has_more: bool,
    next_offset: Option<u64>,
    offset_unit: &'static str,
}

#[derive(Serialize)]
struct ErrorResult {
    error: String,
}

/// Runs `call` and returns the tool result text, and whether it is an error.
pub async fn execute(scope: &RecallScope<'_>, call: &RecallCall) -> (String, bool) {
    let outcome = match call.tool {
        RecallTool::Read => read(scope, &call.arguments).await,
        RecallTool::Search => search(scope, &call.arguments).await,
        RecallTool::List => list(scope, &call.arguments).await,
    };
    match outcome {
        Ok(text) => (text, false),
        Err(message) => error_result(message),
    }
}

/// The answer to a call made after its round's results reached
/// [`ROUND_RESULT_BYTES`].
pub fn over_round_budget() -> (String, bool) {
    error_result(format!(
        "not run: this round's recall results already reached {ROUND_RESULT_BYTES} bytes; \
         make the call again in your next turn, or read a smaller window"
    ))
}

fn error_result(message: String) -> (String, bool) {
    (
        serde_json::to_string(&ErrorResult { error: message })
            .unwrap_or_else(|_| "{\"error\":\"internal error\"}".to_string()),
        true,
    )
}

fn args<'a, T: Deserialize<'a>>(tool: &str, arguments: &'a str) -> Result<T, String> {
    let arguments = if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    };
    serde_json::from_str(arguments).map_err(|e| format!("invalid arguments for {tool}: {e}"))
}

fn explain(e: StoreError) -> String {
    match e {
        StoreError::NotFound { result_ref } => {
            format!("unknown ref {result_ref}: no externalized output with this ref is available")
        }
        StoreError::Expired { result_ref, .. } => format!(
            "expired: the output {result_ref} was removed by retention and can no longer be read"
        ),
        StoreError::InvalidArgument(message) => message,
        other => format!("the result store failed: {other}"),
    }
}

fn to_json<T: Serialize>(value: &T) -> Result<String, String> {
    serde_json::to_string(value).map_err(|e| format!("internal error: {e}"))
}

async fn read(scope: &RecallScope<'_>, arguments: &str) -> Result<String, String> {
    let a: ReadArgs = args("read", arguments)?;
    let offset = a.offset.unwrap_or(0);
    let limit = a.limit.unwrap_or(DEFAULT_READ_LIMIT);
    if offset < 0 {
        return Err(format!("offset must be 0 or more, got {offset}"));
    }
    if limit < -1 {
        return Err(format!(
            "limit must be -1 (to the end) or 0 or more, got {limit}"
        ));
    }
    let limit = if limit == -1 {
        MAX_READ_CHARS
    } else {
        limit.min(MAX_READ_CHARS)
    };
    let window = scope
        .store
        .read(scope.tenant, &a.result_ref, offset, limit)
        .await
        .map_err(explain)?;
    to_json(&ReadResult {
        result_ref: &a.result_ref,
        content: window.content,
        offset: window.offset,
        total_chars: window.total_chars,
        has_more: window.has_more,
        next_offset: window.next_offset,
        offset_unit: "unicode_code_point",
    })
}

fn bounded(
    value: Option<i64>,
    default: usize,
    max: usize,
    name: &str,
    min: i64,
) -> Result<usize, String> {
    match value {
        None => Ok(default),
        Some(v) if v < min => Err(format!("{name} must be at least {min}, got {v}")),
        Some(v) => Ok(usize::try_from(v).unwrap_or(max).min(max)),
    }
}

async fn search(scope: &RecallScope<'_>, arguments: &str) -> Result<String, String> {
    let a: SearchArgs = args("search", arguments)?;
    if a.query.is_empty() {
        return Err("query must not be empty".to_string());
    }
    let limit = bounded(a.limit, DEFAULT_SEARCH_LIMIT, MAX_SEARCH_LIMIT, "limit", 1)?;
    let context = bounded(
        a.context_chars,
        DEFAULT_CONTEXT_CHARS,
        MAX_CONTEXT_CHARS,
        "context_chars",
        0,
    )?
    .min(MAX_SEARCH_CONTEXT_CHARS / (2 * limit));
    match a.result_ref.as_deref().filter(|r| !r.is_empty()) {
        Some(result_ref) => {
            let found = scope
                .store
                .search(scope.tenant, result_ref, &a.query, limit, context)
                .await
                .map_err(explain)?;
            to_json(&found)
        }
        None if crate::store::query_terms(&a.query).is_empty() => Err(format!(
            "the query {:?} has no words to search for; pass a ref for an exact search of any text",
            a.query
        )),
        None => {
            let hits = scope
                .store
                .search_session(scope.tenant, scope.session, &a.query, limit, context)
                .await
                .map_err(explain)?;
            to_json(&Hits { hits })
        }
    }
}

async fn list(scope: &RecallScope<'_>, arguments: &str) -> Result<String, String> {
    let a: ListArgs = args("list", arguments)?;
    let limit = bounded(a.limit, DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, "limit", 1)?;
    let results = scope
        .store
        .list(
            scope.tenant,
            Some(scope.session),
            a.tool_name.as_deref().filter(|t| !t.is_empty()),
            limit,
        )
        .await
        .map_err(explain)?;
    to_json(&Results { results })
}
