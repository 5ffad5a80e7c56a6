//! The operator API against the real server: outputs are
//! externalized by sending chat completions through the proxy, their refs
//! taken from the stubs the mock upstream received, then every endpoint is
//! driven over HTTP.

use super::{always_ok, big_json, chat_body, client, send, setup, setup_with, Setup, KEY};
use http::{HeaderMap, StatusCode};
use serde_json::Value;

const OTHER_KEY: &str = "Bearer sk-someone-else";

/// Characters 0..20000: "αβγ🎉" repeated; then NEEDLE at 20000; then "日本"
/// repeated, 26006 code points in all (and many more UTF-8 bytes).
fn multibyte() -> String {
    format!("{}NEEDLE{}", "αβγ🎉".repeat(5000), "日本".repeat(3000))
}

/// A chat body like `chat_body`, each output produced by the named tool.
fn chat_named(outputs: &[(&str, String)]) -> String {
    let calls: Vec<String> = outputs
        .iter()
        .enumerate()
        .map(|(i, (tool, _))| {
            format!(r#"{{"id":"call_{i}","type":"function","function":{{"name":"{tool}","arguments":"{{}}"}}}}"#)
        })
        .collect();
    let results: Vec<String> = outputs
        .iter()
        .enumerate()
        .map(|(i, (_, o))| {
            format!(
                r#"{{"role":"tool","tool_call_id":"call_{i}","content":{}}}"#,
                serde_json::to_string(o).expect("json")
            )
        })
        .collect();
    format!(
        r#"{{"model":"gpt-test","messages":[{{"role":"user","content":"go"}},{{"role":"assistant","content":null,"tool_calls":[{}]}},{}]}}"#,
        calls.join(","),
        results.join(",")
    )
}

/// Sends `body` through the proxy and returns the refs of the stubs the
/// upstream received, in message order.
async fn externalize(s: &Setup, body: String, headers: &[(&str, &str)]) -> Vec<String> {
    let (status, response_headers, _) = send(
        &client(),
        "POST",
        s.url("/v1/chat/completions"),
        headers,
        body,
    )
    .await;
    assert_eq!(status, 200);
    let n: usize = response_headers["x-toolstub-externalized"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("number");
    let v: Value = serde_json::from_slice(&s.mock.last().body).expect("json");
    let refs: Vec<String> = v["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["content"].as_str())
        .filter_map(|c| c.lines().find_map(|l| l.strip_prefix("ref: ")))
        .map(str::to_string)
        .collect();
    assert_eq!(refs.len(), n);
    refs
}

/// GET with the test credential (plus `extra` headers); the body as text.
async fn get_as(
    s: &Setup,
    path: &str,
    key: &str,
    extra: &[(&str, &str)],
) -> (StatusCode, HeaderMap, String) {
    let mut headers = vec![("authorization", key)];
    headers.extend_from_slice(extra);
    let (status, headers, body) = send(&client(), "GET", s.url(path), &headers, "").await;
    (
        status,
        headers,
        String::from_utf8(body.to_vec()).expect("utf-8 body"),
    )
}

/// GET as `KEY`, expecting 200 JSON.
async fn get_ok(s: &Setup, path: &str) -> (String, Value) {
    let (status, headers, body) = get_as(s, path, KEY, &[]).await;
    assert_eq!(status, 200, "{path}: {body}");
    assert_eq!(headers["content-type"], "application/json");
    let v = serde_json::from_str(&body).expect("json");
    (body, v)
}

/// An OpenAI-format error with this status and code; returns the message.
async fn get_err(s: &Setup, path: &str, key: &str, status: u16, code: &str) -> String {
    let (got, headers, body) = get_as(s, path, key, &[]).await;
    assert_eq!(got.as_u16(), status, "{path}: {body}");
    assert_error(&headers, &body, code)
}

fn assert_error(headers: &HeaderMap, body: &str, code: &str) -> String {
    assert_eq!(headers["content-type"], "application/json");
    let v: Value = serde_json::from_str(body).expect("json error");
    assert_eq!(v["error"]["code"], code, "{body}");
    assert!(v["error"]["type"].is_string(), "{body}");
    v["error"]["message"].as_str().expect("message").to_string()
}

/// The keys appear in the raw JSON in this order (serde structs, not maps).
fn assert_key_order(raw: &str, keys: &[&str]) {
    let mut at = 0;
    for key in keys {
        let needle = format!("\"{key}\":");
        let found = raw[at..]
            .find(&needle)
            .unwrap_or_else(|| panic!("{key} after byte {at} in {raw}"));
        at += found + needle.len();
    }
}

#[tokio::test]
async fn list_newest_first_with_filters_and_limit() {
    let s = setup(always_ok()).await;
    let first = externalize(
        &s,
        chat_body(&[big_json(3000)], ""),
        &[("authorization", KEY), ("x-toolstub-session", "sess-a")],
    )
    .await;
    let second = externalize(
        &s,
        chat_named(&[
            ("read_file", multibyte()),
            ("grep", "match line\n".repeat(3000)),
        ]),
        &[("authorization", KEY), ("x-toolstub-session", "sess-b")],
    )
    .await;
    assert_eq!((first.len(), second.len()), (1, 2));

    let (raw, v) = get_ok(&s, "/toolstub/v1/results").await;
    let results = v["results"].as_array().expect("results");
    let refs: Vec<&str> = results
        .iter()
        .map(|r| r["ref"].as_str().expect("ref"))
        .collect();
    // Newest first; within one request, the last stored first.
    assert_eq!(
        refs,
        [second[1].as_str(), second[0].as_str(), first[0].as_str()]
    );
    assert_key_order(
        &raw,
        &[
            "results",
            "ref",
            "session_id",
            "tool_name",
            "kind",
            "original_chars",
            "created_at",
        ],
    );
    let oldest = &results[2];
    assert_eq!(oldest["session_id"], "sess-a");
    assert_eq!(oldest["tool_name"], "fetch");
    assert_eq!(oldest["kind"], "json");
    assert_eq!(oldest["original_chars"], big_json(3000).chars().count());
    assert!(oldest["created_at"].as_i64().expect("unix ms") > 1_600_000_000_000);
    assert_eq!(
        results[1]["original_chars"], 26_006,
        "code points, not bytes"
    );

    let (_, v) = get_ok(&s, "/toolstub/v1/results?tool_name=read_file").await;
    assert_eq!(v["results"].as_array().expect("results").len(), 1);
    assert_eq!(v["results"][0]["ref"], second[0].as_str());
    let (_, v) = get_ok(&s, "/toolstub/v1/results?session=sess-a").await;
    assert_eq!(v["results"].as_array().expect("results").len(), 1);
    assert_eq!(v["results"][0]["ref"], first[0].as_str());
    let (_, v) = get_ok(&s, "/toolstub/v1/results?limit=1").await;
    assert_eq!(v["results"].as_array().expect("results").len(), 1);
    assert_eq!(v["results"][0]["ref"], second[1].as_str());
    let (_, v) = get_ok(&s, "/toolstub/v1/results?limit=0").await;
    assert_eq!(v["results"], serde_json::json!([]));
    let (_, v) = get_ok(
        &s,
        "/toolstub/v1/results?limit=-1&tool_name=fetch&unknown=ignored",
    )
    .await;
    assert_eq!(v["results"].as_array().expect("results").len(), 1);
    // The filter applies before the limit.
    let (_, v) = get_ok(&s, "/toolstub/v1/results?limit=1&tool_name=fetch").await;
    assert_eq!(v["results"][0]["ref"], first[0].as_str());
    let (_, v) = get_ok(&s, "/toolstub/v1/results?session=nope").await;
    assert_eq!(v["results"], serde_json::json!([]));
    // Another tenant sees nothing.
    let (status, _, body) = get_as(&s, "/toolstub/v1/results", OTHER_KEY, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(body, r#"{"results":[]}"#);
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn read_windows_count_code_points() {
    let s = setup(always_ok()).await;
    let text = multibyte();
    let refs = externalize(
        &s,
        chat_named(&[("read_file", text.clone())]),
        &[("authorization", KEY), ("x-toolstub-session", "sess-r")],
    )
    .await;
    let r = &refs[0];

    let (raw, v) = get_ok(&s, &format!("/toolstub/v1/results/{r}?offset=3&limit=2")).await;
    assert_key_order(
        &raw,
        &[
            "ref",
            "content",
            "offset",
            "limit",
            "total_chars",
            "has_more",
            "next_offset",
            "offset_unit",
            "metadata",
            "session_id",
            "tool_call_id",
            "tool_name",
            "created_at",
            "original_chars",
            "preview_chars",
            "sha256",
            "mime_type",
            "synopsis_kind",
            "synopsis",
        ],
    );
    assert_eq!(v["ref"], r.as_str());
    assert_eq!(v["content"], "🎉α");
    assert_eq!(
        (v["offset"].as_u64(), v["limit"].as_i64()),
        (Some(3), Some(2))
    );
    assert_eq!(v["total_chars"], 26_006);
    assert_eq!(v["has_more"], true);
    assert_eq!(v["next_offset"], 5);
    assert_eq!(v["offset_unit"], "unicode_code_point");
    let m = &v["metadata"];
    assert_eq!(m["session_id"], "sess-r");
    assert_eq!(m["tool_call_id"], "call_0");
    assert_eq!(m["tool_name"], "read_file");
    assert_eq!(m["original_chars"], 26_006);
    assert!(m["preview_chars"].as_u64().expect("preview") > 0);
    let sha = m["sha256"].as_str().expect("sha");
    assert_eq!(sha.len(), 64);
    assert!(r.ends_with(&sha[..16]), "the ref ends with the hash prefix");
    assert!(m["mime_type"].is_null());
    assert_eq!(m["synopsis_kind"], m["synopsis"]["kind"]);
    assert!(m["synopsis"]["title"].is_string());

    let (_, v) = get_ok(
        &s,
        &format!("/toolstub/v1/results/{r}?offset=20000&limit=6"),
    )
    .await;
    assert_eq!(v["content"], "NEEDLE");
    // Defaults: offset 0, limit 20000.
    let (_, v) = get_ok(&s, &format!("/toolstub/v1/results/{r}")).await;
    assert_eq!(
        (v["offset"].as_u64(), v["limit"].as_i64()),
        (Some(0), Some(20_000))
    );
    assert_eq!(
        v["content"].as_str().expect("content").chars().count(),
        20_000
    );
    assert_eq!(v["next_offset"], 20_000);
    // limit=-1 reads to the end.
    let (_, v) = get_ok(
        &s,
        &format!("/toolstub/v1/results/{r}?offset=26000&limit=-1"),
    )
    .await;
    assert_eq!(v["content"], "日本日本日本");
    assert_eq!(
        (v["has_more"].as_bool(), v["next_offset"].is_null()),
        (Some(false), true)
    );
    let (_, v) = get_ok(&s, &format!("/toolstub/v1/results/{r}?limit=-1")).await;
    assert_eq!(v["content"], text.as_str());
    // Past the end: empty, no more.
    let (_, v) = get_ok(
        &s,
        &format!("/toolstub/v1/results/{r}?offset=30000&limit=10"),
    )
    .await;
    assert_eq!(v["content"], "");
    assert_eq!(v["offset"], 30_000);
    assert_eq!(
        (v["has_more"].as_bool(), v["next_offset"].is_null()),
        (Some(false), true)
    );
    // limit=0: nothing read, but there is more.
    let (_, v) = get_ok(&s, &format!("/toolstub/v1/results/{r}?offset=10&limit=0")).await;
    assert_eq!(
        (v["content"].as_str(), v["has_more"].as_bool()),
        (Some(""), Some(true))
    );
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn search_within_a_ref_and_across_a_session() {
    let s = setup(always_ok()).await;
    let refs = externalize(
        &s,
        chat_named(&[("read_file", multibyte()), ("fetch", big_json(3000))]),
        &[("authorization", KEY), ("x-toolstub-session", "sess-s")],
    )
    .await;
    let (text_ref, json_ref) = (&refs[0], &refs[1]);

    let (raw, v) = get_ok(
        &s,
        &format!("/toolstub/v1/results/{text_ref}/search?q=NEEDLE&context_chars=2"),
    )
    .await;
    assert_key_order(&raw, &["ref", "matches", "offset", "snippet"]);
    assert_eq!(v["ref"], text_ref.as_str());
    assert_eq!(
        v["matches"],
        serde_json::json!([{"offset": 20000, "snippet": "γ🎉NEEDLE日本"}])
    );
    // A percent-encoded CJK query; offsets in code points; the limit.
    let (_, v) = get_ok(
        &s,
        &format!(
            "/toolstub/v1/results/{text_ref}/search?q=%E6%97%A5%E6%9C%AC&limit=3&context_chars=0"
        ),
    )
    .await;
    let offsets: Vec<u64> = v["matches"]
        .as_array()
        .expect("matches")
        .iter()
        .map(|m| m["offset"].as_u64().expect("offset"))
        .collect();
    assert_eq!(offsets, [20_006, 20_008, 20_010]);
    assert_eq!(v["matches"][0]["snippet"], "日本");
    // Case-sensitive, '+' is a space: nothing.
    let (_, v) = get_ok(
        &s,
        &format!("/toolstub/v1/results/{text_ref}/search?q=needle"),
    )
    .await;
    assert_eq!(v["matches"], serde_json::json!([]));
    let (_, v) = get_ok(
        &s,
        &format!("/toolstub/v1/results/{json_ref}/search?q=%22user+12%22&limit=-1&context_chars=5"),
    )
    .await;
    let matches = v["matches"].as_array().expect("matches");
    assert_eq!(matches.len(), 1, "{v}");
    assert_eq!(matches[0]["snippet"], "ame\":\"user 12\",\"act");

    s.proxy.app.store.flush_index().await.expect("index");
    let (raw, v) = get_ok(&s, "/toolstub/v1/search?q=user+1234&session=sess-s&limit=5").await;
    assert_key_order(
        &raw,
        &["hits", "ref", "tool_name", "offset", "snippet", "score"],
    );
    let hits = v["hits"].as_array().expect("hits");
    assert!(!hits.is_empty() && hits.len() <= 5, "{v}");
    assert_eq!(hits[0]["ref"], json_ref.as_str());
    assert_eq!(hits[0]["tool_name"], "fetch");
    assert!(
        hits[0]["snippet"]
            .as_str()
            .expect("snippet")
            .contains("1234"),
        "{v}"
    );
    assert!(hits[0]["score"].is_f64());
    let offset = hits[0]["offset"].as_u64().expect("offset") as usize;
    let at: String = big_json(3000).chars().skip(offset).take(4).collect();
    assert!(
        at == "user" || at == "1234",
        "offset {offset} points at {at:?}, not a query term"
    );
    // Another session, another tenant: nothing.
    let (_, v) = get_ok(&s, "/toolstub/v1/search?q=user&session=other").await;
    assert_eq!(v["hits"], serde_json::json!([]));
    let (status, _, body) = get_as(
        &s,
        "/toolstub/v1/search?q=user&session=sess-s",
        OTHER_KEY,
        &[],
    )
    .await;
    assert_eq!((status.as_u16(), body.as_str()), (200, r#"{"hits":[]}"#));
    // The session is required for ranked search.
    let message = get_err(
        &s,
        "/toolstub/v1/search?q=user",
        KEY,
        400,
        "invalid_request",
    )
    .await;
    assert!(message.contains("session"), "{message}");
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn another_tenants_ref_is_a_404_like_an_unknown_one() {
    let s = setup(always_ok()).await;
    let refs = externalize(
        &s,
        chat_body(&[big_json(3000)], ""),
        &[("authorization", KEY)],
    )
    .await;
    let r = &refs[0];
    let unknown = "tr_call_0_0123456789abcdef";
    for suffix in ["", "/search?q=user"] {
        let (status_other, headers_other, body_other) = get_as(
            &s,
            &format!("/toolstub/v1/results/{r}{suffix}"),
            OTHER_KEY,
            &[],
        )
        .await;
        let (status_unknown, headers_unknown, body_unknown) = get_as(
            &s,
            &format!("/toolstub/v1/results/{unknown}{suffix}"),
            KEY,
            &[],
        )
        .await;
        assert_eq!(status_other, 404);
        assert_eq!(status_unknown, 404);
        assert_eq!(
            headers_other["content-type"],
            headers_unknown["content-type"]
        );
        assert_eq!(
            body_other.replace(r.as_str(), "REF"),
            body_unknown.replace(unknown, "REF")
        );
        assert_error(&headers_other, &body_other, "not_found");
    }
    // Without any credential: the anonymous tenant, also a 404.
    let (status, _, _) = send(
        &client(),
        "GET",
        s.url(&format!("/toolstub/v1/results/{r}")),
        &[],
        "",
    )
    .await;
    assert_eq!(status, 404);
    // The owner still reads it.
    get_ok(&s, &format!("/toolstub/v1/results/{r}?limit=10")).await;
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn an_expired_ref_answers_410_expired() {
    let s = setup(always_ok()).await;
    let refs = externalize(
        &s,
        chat_body(&[big_json(3000)], ""),
        &[("authorization", KEY)],
    )
    .await;
    let r = refs[0].clone();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    s.proxy
        .app
        .store
        .sweep_at(now + 31 * 86_400_000)
        .await
        .expect("sweep");
    let message = get_err(
        &s,
        &format!("/toolstub/v1/results/{r}"),
        KEY,
        410,
        "expired",
    )
    .await;
    assert!(
        message.contains("expired") && message.contains(&r),
        "{message}"
    );
    get_err(
        &s,
        &format!("/toolstub/v1/results/{r}/search?q=user"),
        KEY,
        410,
        "expired",
    )
    .await;
    // Expired outputs leave the list; another tenant still gets a plain 404.
    let (_, v) = get_ok(&s, "/toolstub/v1/results").await;
    assert_eq!(v["results"], serde_json::json!([]));
    get_err(
        &s,
        &format!("/toolstub/v1/results/{r}"),
        OTHER_KEY,
        404,
        "not_found",
    )
    .await;
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn invalid_arguments_methods_and_paths() {
    let s = setup(always_ok()).await;
    let refs = externalize(
        &s,
        chat_body(&[big_json(3000)], ""),
        &[("authorization", KEY)],
    )
    .await;
    let r = &refs[0];
    let bad_requests = [
        (format!("/toolstub/v1/results/{r}?offset=abc"), "offset"),
        (format!("/toolstub/v1/results/{r}?offset=-1"), "offset"),
        (format!("/toolstub/v1/results/{r}?limit=-2"), "limit"),
        (format!("/toolstub/v1/results/{r}?limit=1.5"), "limit"),
        (
            format!("/toolstub/v1/results/{r}?limit=1&limit=2"),
            "more than once",
        ),
        (format!("/toolstub/v1/results/{r}?offset=%zz"), "percent"),
        (format!("/toolstub/v1/results/{r}/search?q="), "q"),
        (format!("/toolstub/v1/results/{r}/search"), "q"),
        (
            format!("/toolstub/v1/results/{r}/search?q=x&context_chars=-1"),
            "context_chars",
        ),
        (
            format!("/toolstub/v1/results/{r}/search?q=x&limit=-3"),
            "limit",
        ),
        ("/toolstub/v1/results?limit=-5".to_string(), "limit"),
        ("/toolstub/v1/results?limit=many".to_string(), "limit"),
        ("/toolstub/v1/search?session=x".to_string(), "q"),
        (
            "/toolstub/v1/search?q=x&session=y&limit=-2".to_string(),
            "limit",
        ),
        ("/toolstub/v1/results/not-a-ref".to_string(), "not a ref"),
        (
            "/toolstub/v1/results/tr_a%20b/search?q=x".to_string(),
            "not a ref",
        ),
    ];
    for (path, mentions) in &bad_requests {
        let message = get_err(&s, path, KEY, 400, "invalid_request").await;
        assert!(message.contains(mentions), "{path}: {message}");
    }
    let (status, headers, body) = get_as(
        &s,
        &format!("/toolstub/v1/results/{r}?offset=abc"),
        KEY,
        &[],
    )
    .await;
    assert_eq!(status, 400);
    let v: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(headers["content-type"], "application/json");

    for path in [
        "/toolstub/v1/nope",
        "/toolstub/v1/results/",
        "/toolstub/v1/results/tr_a/other",
        "/toolstub/v1/search/x",
    ] {
        let message = get_err(&s, path, KEY, 404, "not_found").await;
        assert!(message.contains("no operator endpoint"), "{message}");
    }
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        let (status, headers, body) = send(
            &client(),
            method,
            s.url(&format!("/toolstub/v1/results/{r}")),
            &[("authorization", KEY)],
            "{}",
        )
        .await;
        assert_eq!(status, 405, "{method}");
        assert_eq!(headers["allow"], "GET");
        assert_error(
            &headers,
            &String::from_utf8_lossy(&body),
            "method_not_allowed",
        );
    }
    // Nothing of this reached the upstream: only the chat completion did.
    assert_eq!(s.mock.requests().len(), 1);
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn the_admin_token_guards_the_api_when_set() {
    let s = setup_with(
        always_ok(),
        &[("TOOLSTUB_OPERATOR_API_ADMIN_TOKEN", "s3cret-token")],
    )
    .await;
    // The proxied API does not need it.
    let refs = externalize(
        &s,
        chat_body(&[big_json(3000)], ""),
        &[("authorization", KEY)],
    )
    .await;
    let path = format!("/toolstub/v1/results/{}?limit=5", refs[0]);
    let message = get_err(&s, &path, KEY, 401, "unauthorized").await;
    assert!(message.contains("x-toolstub-admin-token"), "{message}");
    for wrong in ["s3cret-toke", "s3cret-token2", "S3CRET-TOKEN", ""] {
        let (status, headers, body) =
            get_as(&s, &path, KEY, &[("x-toolstub-admin-token", wrong)]).await;
        assert_eq!(status, 401, "{wrong:?}");
        assert_error(&headers, &body, "unauthorized");
    }
    // Checked before the path: an unknown endpoint is a 401 too.
    get_err(&s, "/toolstub/v1/nope", KEY, 401, "unauthorized").await;
    let (status, _, body) = get_as(
        &s,
        &path,
        KEY,
        &[("x-toolstub-admin-token", "s3cret-token")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // The token grants no other tenant's data: the tenant is still the credential's.
    let (status, _, _) = get_as(
        &s,
        &path,
        OTHER_KEY,
        &[("x-toolstub-admin-token", "s3cret-token")],
    )
    .await;
    assert_eq!(status, 404);
    s.proxy.shutdown().await;

    // Without a configured token, no header is needed.
    let s = setup(always_ok()).await;
    get_ok(&s, "/toolstub/v1/results").await;
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_disabled_api_is_a_404_and_is_not_forwarded() {
    let s = setup_with(always_ok(), &[("TOOLSTUB_OPERATOR_API_ENABLED", "false")]).await;
    let refs = externalize(
        &s,
        chat_body(&[big_json(3000)], ""),
        &[("authorization", KEY)],
    )
    .await;
    for path in [
        "/toolstub/v1/results".to_string(),
        format!("/toolstub/v1/results/{}", refs[0]),
        "/toolstub/v1/search?q=user&session=x".to_string(),
    ] {
        let message = get_err(&s, &path, KEY, 404, "not_found").await;
        assert!(message.contains("disabled"), "{message}");
    }
    assert_eq!(
        s.mock.requests().len(),
        1,
        "only the chat completion went upstream"
    );
    s.proxy.shutdown().await;
}
