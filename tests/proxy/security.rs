//! Security: tenant isolation through the operator API and
//! through the recall tools; no credential in the database, the logs or the
//! metrics; no SQL or FTS injection through refs and queries; and the
//! operator API's switches (off, its own address, an admin token).

use super::mock::{completion, ok_json, Recorded, Reply, Script};
use super::{big_json, chat_body, client, send, setup, setup_with, Setup, KEY};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

const OTHER: &str = "Bearer sk-other-tenant-9876543210";
const SECRET_MARKER: &str = "tenant-a-secret-marker";
const SESSION: &str = "sess-shared";

/// The ref in the first stub of a request body the mock received.
fn stub_ref(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v["messages"].as_array()?.iter().find_map(|m| {
        m["content"]
            .as_str()?
            .lines()
            .find_map(|l| l.strip_prefix("ref: "))
            .map(str::to_string)
    })
}

/// Tenant A's output: large, carrying a marker only A may read.
fn tenant_a_output() -> String {
    format!("{SECRET_MARKER} zebra\n{}", big_json(3000))
}

/// Stores one output as tenant A (session [`SESSION`]); returns its ref.
async fn store_as_a(s: &Setup) -> String {
    let (status, _, _) = send(
        &client(),
        "POST",
        s.url("/v1/chat/completions"),
        &[("authorization", KEY), ("x-toolstub-session", SESSION)],
        chat_body(&[tenant_a_output()], ""),
    )
    .await;
    assert_eq!(status, 200);
    let first = s
        .mock
        .requests()
        .into_iter()
        .find_map(|r| stub_ref(&r.body));
    first.expect("A's request carried a stub")
}

async fn get(s: &Setup, path: &str, credential: Option<&str>) -> (u16, Value) {
    let headers: Vec<(&str, &str)> = credential
        .map(|c| vec![("authorization", c)])
        .unwrap_or_default();
    let (status, _, body) = send(&client(), "GET", s.url(path), &headers, "").await;
    (
        status.as_u16(),
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn another_tenant_cannot_read_search_or_list_through_the_operator_api() {
    let s = setup(Arc::new(|_: &Recorded| ok_json("ok"))).await;
    let r = store_as_a(&s).await;
    // A sees its own output (the control).
    let (status, v) = get(&s, &format!("/toolstub/v1/results/{r}"), Some(KEY)).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["content"]
        .as_str()
        .expect("content")
        .starts_with(SECRET_MARKER));
    let (_, v) = get(
        &s,
        &format!("/toolstub/v1/search?q=zebra&session={SESSION}"),
        Some(KEY),
    )
    .await;
    assert_eq!(v["hits"].as_array().expect("hits").len(), 1, "{v}");

    let unknown = format!("{}0", &r[..r.len() - 1]);
    for who in [Some(OTHER), None] {
        let (status, v) = get(&s, &format!("/toolstub/v1/results/{r}"), who).await;
        assert_eq!(status, 404, "{who:?}: {v}");
        // The same answer as for a ref that never existed.
        let (status_unknown, v_unknown) =
            get(&s, &format!("/toolstub/v1/results/{unknown}"), who).await;
        assert_eq!(status_unknown, 404);
        assert_eq!(
            v["error"]["message"].as_str().map(|m| m.replace(&r, "R")),
            v_unknown["error"]["message"]
                .as_str()
                .map(|m| m.replace(&unknown, "R")),
        );
        let (status, v) = get(
            &s,
            &format!("/toolstub/v1/results/{r}/search?q={SECRET_MARKER}"),
            who,
        )
        .await;
        assert_eq!(status, 404, "{v}");
        let (status, v) = get(&s, "/toolstub/v1/results?limit=-1", who).await;
        assert_eq!(status, 200);
        assert_eq!(v["results"], json!([]), "{who:?} lists nothing: {v}");
        let (status, v) = get(&s, &format!("/toolstub/v1/results?session={SESSION}"), who).await;
        assert_eq!((status, &v["results"]), (200, &json!([])));
        for q in ["zebra", SECRET_MARKER] {
            let (status, v) = get(
                &s,
                &format!("/toolstub/v1/search?q={q}&session={SESSION}"),
                who,
            )
            .await;
            assert_eq!((status, &v["hits"]), (200, &json!([])), "{who:?} {q}");
        }
    }
    s.proxy.shutdown().await;
}

/// Calls every recall tool on tenant A's ref and session, as tenant B.
fn prying_mock(a_ref: Arc<Mutex<Option<String>>>) -> Script {
    Arc::new(move |r: &Recorded| {
        let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
        let messages = v["messages"].as_array().cloned().unwrap_or_default();
        let results: Vec<String> = messages
            .iter()
            .filter(|m| {
                m["role"] == "tool"
                    && m["tool_call_id"]
                        .as_str()
                        .is_some_and(|id| id.starts_with("rc_"))
            })
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .collect();
        if !results.is_empty() {
            return Reply::Full(
                200,
                vec![("content-type", "application/json".to_string())],
                completion(&serde_json::to_string(&results).expect("json")),
            );
        }
        let target = a_ref.lock().expect("lock").clone();
        let offers = v["tools"].as_array().is_some_and(|t| !t.is_empty());
        match target {
            Some(target) if offers => {
                let call = |id: &str, name: &str, args: Value| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}});
                let calls = vec![
                    call(
                        "rc_read",
                        "tool_result_read",
                        json!({"ref": target, "limit": -1}),
                    ),
                    call(
                        "rc_search_ref",
                        "tool_result_search",
                        json!({"ref": target, "query": SECRET_MARKER}),
                    ),
                    call("rc_search", "tool_result_search", json!({"query": "zebra"})),
                    call(
                        "rc_search_marker",
                        "tool_result_search",
                        json!({"query": SECRET_MARKER}),
                    ),
                    call("rc_list", "tool_result_list", json!({"limit": 50})),
                ];
                let body = json!({
                    "id": "chatcmpl-pry", "object": "chat.completion", "created": 1, "model": "mock",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": calls}, "finish_reason": "tool_calls"}],
                });
                Reply::Full(
                    200,
                    vec![("content-type", "application/json".to_string())],
                    body.to_string(),
                )
            }
            _ => ok_json("stored"),
        }
    })
}

#[tokio::test]
async fn another_tenant_cannot_read_search_or_list_through_the_recall_tools() {
    let a_ref: Arc<Mutex<Option<String>>> = Arc::default();
    let s = setup(prying_mock(a_ref.clone())).await;
    let r = store_as_a(&s).await;
    *a_ref.lock().expect("lock") = Some(r.clone());
    // B's own conversation, in the same session id, with its own large output
    // (so the recall tools are offered): the model pries at A's ref. (The
    // streaming path runs the calls through the same scope.)
    let b_output = format!("tenant b output\n{}", big_json(2500));
    let (status, _, body) = send(
        &client(),
        "POST",
        s.url("/v1/chat/completions"),
        &[("authorization", OTHER), ("x-toolstub-session", SESSION)],
        chat_body(std::slice::from_ref(&b_output), ""),
    )
    .await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&body).expect("json");
    let results = v["choices"][0]["message"]["content"]
        .as_str()
        .expect("content");
    assert!(!results.contains("zebra"), "{results}");
    // What the recall tools answered B, as the model saw it in round 2.
    let rounds: Vec<Value> = s
        .mock
        .requests()
        .iter()
        .filter_map(|r| serde_json::from_slice::<Value>(&r.body).ok())
        .collect();
    let answered: Vec<Value> = rounds
        .iter()
        .flat_map(|v| v["messages"].as_array().cloned().unwrap_or_default())
        .filter(|m| {
            m["role"] == "tool"
                && m["tool_call_id"]
                    .as_str()
                    .is_some_and(|id| id.starts_with("rc_"))
        })
        .collect();
    assert!(answered.len() >= 5, "the recall calls ran");
    for m in &answered {
        let id = m["tool_call_id"].as_str().expect("id");
        let content = m["content"].as_str().expect("content");
        assert!(!content.contains("zebra"), "{id}: {content}");
        let v: Value = serde_json::from_str(content).expect("JSON result");
        match id {
            "rc_read" | "rc_search_ref" => {
                let e = v["error"]
                    .as_str()
                    .expect("an error for another tenant's ref");
                assert!(e.contains("unknown ref"), "{id}: {e}");
            }
            "rc_search" | "rc_search_marker" => {
                assert!(!content.contains(&r), "{id}: {content}");
            }
            "rc_list" => {
                assert!(!content.contains(&r), "{id}: {content}");
            }
            other => panic!("unexpected call {other}"),
        }
    }
    // A still reads its own output.
    let (status, _) = get(&s, &format!("/toolstub/v1/results/{r}"), Some(KEY)).await;
    assert_eq!(status, 200);
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn refs_and_queries_cannot_inject_sql_or_fts_syntax() {
    let s = setup(Arc::new(|_: &Recorded| ok_json("ok"))).await;
    let r = store_as_a(&s).await;
    let hostile_refs = [
        "tr_x'%20OR%201=1%20--",
        "tr_x%27%3B%20DROP%20TABLE%20outputs%3B%20--",
        "tr_x%22%20OR%20%221%22=%221",
        "tr_%25",
        "tr_x%00",
    ];
    for hostile in hostile_refs {
        for path in [
            format!("/toolstub/v1/results/{hostile}"),
            format!("/toolstub/v1/results/{hostile}/search?q=a"),
        ] {
            let (status, v) = get(&s, &path, Some(KEY)).await;
            assert_eq!(status, 400, "{path}: {v}");
            assert_eq!(v["error"]["code"], "invalid_request");
        }
    }
    // A well-formed ref that merely looks like SQL is just not found.
    let (status, _) = get(&s, "/toolstub/v1/results/tr_x_OR_1_1", Some(KEY)).await;
    assert_eq!(status, 404);
    let queries = [
        "%22a%22%20OR%20b*",
        "NEAR(",
        ")",
        "-x",
        "*",
        "a%20AND",
        "zebra%20NOT%20zebra",
        "text:zebra",
        "%27%3B%20DELETE%20FROM%20outputs%3B%20--",
        "%22",
        "%5E",
    ];
    for q in queries {
        for path in [
            format!("/toolstub/v1/search?q={q}&session={SESSION}"),
            format!("/toolstub/v1/results/{r}/search?q={q}"),
            format!("/toolstub/v1/results?tool_name={q}"),
        ] {
            let (status, v) = get(&s, &path, Some(KEY)).await;
            assert!(
                status == 200 || status == 400,
                "{path}: {status} {v} (never a 500)"
            );
        }
    }
    // FTS operators are words here: `zebra NOT zebra` still finds zebra.
    let (_, v) = get(
        &s,
        &format!("/toolstub/v1/search?q=zebra%20NOT%20zebra&session={SESSION}"),
        Some(KEY),
    )
    .await;
    assert_eq!(v["hits"].as_array().map(Vec::len), Some(1), "{v}");
    // The store is intact and every tenant still sees only its own.
    let (status, v) = get(&s, &format!("/toolstub/v1/results/{r}?limit=-1"), Some(KEY)).await;
    assert_eq!(status, 200);
    assert_eq!(v["content"], tenant_a_output());
    let (_, v) = get(
        &s,
        "/toolstub/v1/results?tool_name=x%27%20OR%20%271%27=%271",
        Some(KEY),
    )
    .await;
    assert_eq!(v["results"], json!([]));
    let (_, metrics) = {
        let (status, _, body) = send(&client(), "GET", s.url("/metrics"), &[], "").await;
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    assert!(
        !metrics.contains("toolstub_store_errors_total{"),
        "{metrics}"
    );
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn hostile_recall_arguments_are_answered_as_errors_and_the_loop_goes_on() {
    let script: Script = Arc::new(|r: &Recorded| {
        let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
        let answered = v["messages"]
            .as_array()
            .and_then(|m| m.last())
            .is_some_and(|m| {
                m["role"] == "tool"
                    && m["tool_call_id"]
                        .as_str()
                        .is_some_and(|id| id.starts_with("rc_"))
            });
        if answered {
            let results: Vec<String> = v["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| {
                    m["tool_call_id"]
                        .as_str()
                        .is_some_and(|id| id.starts_with("rc_"))
                })
                .map(|m| m["content"].as_str().unwrap_or_default().to_string())
                .collect();
            return ok_json(&serde_json::to_string(&results).expect("json"));
        }
        let call = |id: &str, name: &str, args: Value| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}});
        let mut calls = Vec::new();
        for (i, r) in [
            "tr_x' OR 1=1 --",
            "tr_x\"; DROP TABLE outputs; --",
            "' OR ''='",
        ]
        .iter()
        .enumerate()
        {
            calls.push(call(
                &format!("rc_r{i}"),
                "tool_result_read",
                json!({"ref": r}),
            ));
            calls.push(call(
                &format!("rc_s{i}"),
                "tool_result_search",
                json!({"ref": r, "query": "a"}),
            ));
        }
        for (i, q) in ["\"a\" OR b*", "NEAR(", ")", "-x", "*", "zebra NOT zebra"]
            .iter()
            .enumerate()
        {
            calls.push(call(
                &format!("rc_q{i}"),
                "tool_result_search",
                json!({"query": q}),
            ));
        }
        calls.push(call(
            "rc_l",
            "tool_result_list",
            json!({"tool_name": "x' OR '1'='1"}),
        ));
        let body = json!({
            "id": "chatcmpl-h", "object": "chat.completion", "created": 1, "model": "mock",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": calls}, "finish_reason": "tool_calls"}],
        });
        Reply::Full(
            200,
            vec![("content-type", "application/json".to_string())],
            body.to_string(),
        )
    });
    let s = setup(script).await;
    let (status, _, body) = send(
        &client(),
        "POST",
        s.url("/v1/chat/completions"),
        &[("authorization", KEY), ("x-toolstub-session", SESSION)],
        chat_body(&[tenant_a_output()], ""),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let v: Value = serde_json::from_slice(&body).expect("json");
    let results: Vec<String> = serde_json::from_str(
        v["choices"][0]["message"]["content"]
            .as_str()
            .expect("content"),
    )
    .expect("the mock's summary");
    assert_eq!(results.len(), 13);
    for (i, result) in results.iter().enumerate() {
        let r: Value = serde_json::from_str(result).expect("JSON result");
        if i < 6 {
            assert!(r["error"].is_string(), "{result}");
        } else if i < 12 {
            assert!(
                r.get("hits").is_some() || r["error"].is_string(),
                "{result}"
            );
        } else {
            assert!(
                !result.contains("tr_"),
                "the list filter is a value: {result}"
            );
        }
    }
    // `zebra NOT zebra` is three words, not an FTS expression: A's output matches.
    assert!(results[11].contains("zebra"), "{}", results[11]);
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn the_operator_api_can_be_switched_off() {
    let s = setup_with(
        Arc::new(|_: &Recorded| ok_json("ok")),
        &[("TOOLSTUB_OPERATOR_API_ENABLED", "false")],
    )
    .await;
    for path in ["/toolstub/v1/results", "/toolstub/v1/search?q=a&session=s"] {
        let (status, v) = get(&s, path, Some(KEY)).await;
        assert_eq!(status, 404);
        assert!(v["error"]["message"]
            .as_str()
            .expect("message")
            .contains("disabled"));
    }
    assert!(s.mock.requests().is_empty(), "never forwarded upstream");
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn the_operator_api_can_move_to_its_own_address() {
    let s = setup_with(
        Arc::new(|_: &Recorded| ok_json("ok")),
        &[("TOOLSTUB_OPERATOR_API_LISTEN", "127.0.0.1:0")],
    )
    .await;
    let operator = s.proxy.operator_addr.expect("a second listener");
    assert_ne!(operator, s.proxy.addr);
    let r = store_as_a(&s).await;
    let before = s.mock.requests().len();
    // The main listener no longer serves it (and does not forward it).
    let (status, v) = get(&s, &format!("/toolstub/v1/results/{r}"), Some(KEY)).await;
    assert_eq!(status, 404, "{v}");
    // Its own listener does, for the same tenant rules.
    let c = client();
    let (status, _, body) = send(
        &c,
        "GET",
        format!("http://{operator}/toolstub/v1/results/{r}"),
        &[("authorization", KEY)],
        "",
    )
    .await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&body).expect("json");
    assert!(v["content"]
        .as_str()
        .expect("content")
        .starts_with(SECRET_MARKER));
    let (status, _, _) = send(
        &c,
        "GET",
        format!("http://{operator}/toolstub/v1/results/{r}"),
        &[("authorization", OTHER)],
        "",
    )
    .await;
    assert_eq!(status, 404);
    // The operator listener serves nothing else: no proxying, no health.
    for path in ["/v1/models", "/healthz", "/metrics"] {
        let (status, _, _) = send(&c, "GET", format!("http://{operator}{path}"), &[], "").await;
        assert_eq!(status, 404, "{path}");
    }
    let (status, _, _) = send(
        &c,
        "POST",
        format!("http://{operator}/v1/chat/completions"),
        &[],
        r#"{"messages":[]}"#,
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(s.mock.requests().len(), before, "nothing went upstream");
    // The main listener still proxies.
    let (status, _, _) = send(&c, "GET", s.url("/v1/models"), &[], "").await;
    assert_eq!(status, 200);
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn the_operator_api_can_require_an_admin_token() {
    let s = setup_with(
        Arc::new(|_: &Recorded| ok_json("ok")),
        &[("TOOLSTUB_OPERATOR_API_ADMIN_TOKEN", "adm-7f3c9e")],
    )
    .await;
    let r = store_as_a(&s).await;
    let c = client();
    let path = format!("/toolstub/v1/results/{r}");
    for (token, expected) in [
        (None, 401),
        (Some(""), 401),
        (Some("adm-7f3c9"), 401),
        (Some("adm-7f3c9e0"), 401),
        (Some("ADM-7F3C9E"), 401),
        (Some("adm-7f3c9e"), 200),
    ] {
        let mut headers = vec![("authorization", KEY)];
        if let Some(t) = token {
            headers.push(("x-toolstub-admin-token", t));
        }
        let (status, _, body) = send(&c, "GET", s.url(&path), &headers, "").await;
        assert_eq!(
            status,
            expected,
            "{token:?}: {}",
            String::from_utf8_lossy(&body)
        );
        if expected == 401 {
            let v: Value = serde_json::from_slice(&body).expect("json");
            assert_eq!(v["error"]["code"], "unauthorized");
        }
    }
    // Checked before the path: without the token nothing is learned about endpoints.
    let (status, _, _) = send(&c, "GET", s.url("/toolstub/v1/nope"), &[], "").await;
    assert_eq!(status, 401);
    // The token does not widen the tenant scope: another credential with the
    // right token still cannot read A's output.
    let (status, _, _) = send(
        &c,
        "GET",
        s.url(&path),
        &[
            ("authorization", OTHER),
            ("x-toolstub-admin-token", "adm-7f3c9e"),
        ],
        "",
    )
    .await;
    assert_eq!(status, 404);
    // The proxied API does not need it, and never forwards it.
    send(
        &c,
        "GET",
        s.url("/v1/models"),
        &[("x-toolstub-admin-token", "adm-7f3c9e")],
        "",
    )
    .await;
    assert!(s
        .mock
        .last()
        .headers
        .get("x-toolstub-admin-token")
        .is_none());
    s.proxy.shutdown().await;
}

/// Runs the real binary with JSON debug logs, sends traffic that carries
/// credentials in every accepted header plus an admin token, then greps the
/// database files, the logs and the metrics for them.
#[tokio::test]
async fn no_credential_reaches_the_database_the_logs_or_the_metrics() {
    let secrets = [
        "sk-secret-authz-5b1e0c",
        "sk-secret-xapikey-77aa01",
        "sk-secret-apikey-c3d4e5",
        "adm-secret-token-19f2",
    ];
    let a_ref: Arc<Mutex<Option<String>>> = Arc::default();
    let s_ref = a_ref.clone();
    // The mock reads back the stub once (a recall round), then answers.
    let script: Script = Arc::new(move |r: &Recorded| {
        let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
        let last_is_recall = v["messages"]
            .as_array()
            .and_then(|m| m.last())
            .is_some_and(|m| m["role"] == "tool" && m["tool_call_id"] == "rc_1");
        match stub_ref(&r.body) {
            Some(found) if !last_is_recall => {
                *s_ref.lock().expect("lock") = Some(found.clone());
                let args = json!({"ref": found, "limit": 100}).to_string();
                let body = json!({
                    "id": "c", "object": "chat.completion", "created": 1, "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "rc_1", "type": "function", "function": {"name": "tool_result_read", "arguments": args}}]}, "finish_reason": "tool_calls"}],
                });
                Reply::Full(
                    200,
                    vec![("content-type", "application/json".to_string())],
                    body.to_string(),
                )
            }
            _ => ok_json("ok"),
        }
    });
    let mock = super::mock::start(script).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("secrets.db");
    let db_arg = db.to_string_lossy().to_string();
    let upstream = format!("http://{}", mock.addr);
    let proxy = super::Binary::serve(
        &["--upstream", &upstream, "--db", &db_arg],
        &[
            ("RUST_LOG", "debug"),
            ("TOOLSTUB_OPERATOR_API_ADMIN_TOKEN", secrets[3]),
        ],
    )
    .await;
    let base = format!("http://{}", proxy.addr);
    let c = client();
    let authz = format!("Bearer {}", secrets[0]);
    let credentials: [(&str, &str); 3] = [
        ("authorization", &authz),
        ("x-api-key", secrets[1]),
        ("api-key", secrets[2]),
    ];
    for (i, (name, value)) in credentials.iter().enumerate() {
        let output = format!("output of credential {i}\n{}", big_json(2500 + i));
        for streaming in [false, true] {
            let extra = if streaming { r#","stream":true"# } else { "" };
            let (status, _, _) = send(
                &c,
                "POST",
                format!("{base}/v1/chat/completions"),
                &[(name, value), ("x-toolstub-admin-token", secrets[3])],
                chat_body(std::slice::from_ref(&output), extra),
            )
            .await;
            assert_eq!(status, 200);
        }
        let r = a_ref
            .lock()
            .expect("lock")
            .clone()
            .expect("a stub was seen");
        for (path, token) in [
            (format!("/toolstub/v1/results/{r}"), secrets[3]),
            ("/toolstub/v1/results".to_string(), secrets[3]),
            (
                "/toolstub/v1/search?q=output&session=x".to_string(),
                secrets[3],
            ),
            (format!("/toolstub/v1/results/{r}"), "wrong-token"),
        ] {
            send(
                &c,
                "GET",
                format!("{base}{path}"),
                &[(name, value), ("x-toolstub-admin-token", token)],
                "",
            )
            .await;
        }
        send(&c, "GET", format!("{base}/v1/models"), &[(name, value)], "").await;
    }
    let (status, _, _) = send(&c, "GET", format!("{base}/metrics"), &[], "").await;
    assert_eq!(
        status, 401,
        "the metrics need the admin token once one is set"
    );
    let admin = [("x-toolstub-admin-token", secrets[3])];
    let (_, _, metrics) = send(&c, "GET", format!("{base}/metrics"), &admin, "").await;
    // SIGKILL: the WAL stays as it was, with whatever it holds.
    let log = proxy.kill();
    assert!(log.contains("\"level\":\"DEBUG\""), "debug logs were on");
    assert!(log.contains("request rewritten"));
    let mut files = vec![
        ("metrics".to_string(), metrics.to_vec()),
        ("log".to_string(), log.into_bytes()),
    ];
    for suffix in ["", "-wal", "-shm"] {
        let path = format!("{}{suffix}", db.display());
        if let Ok(bytes) = std::fs::read(&path) {
            files.push((path, bytes));
        }
    }
    assert!(files.len() >= 4, "the database and its WAL exist");
    let stored_somewhere = files
        .iter()
        .any(|(_, bytes)| memchr::memmem::find(bytes, b"output of credential 1").is_some());
    assert!(stored_somewhere, "the outputs are in the files grepped");
    for (name, bytes) in &files {
        for secret in secrets {
            assert!(
                memchr::memmem::find(bytes, secret.as_bytes()).is_none(),
                "{secret} found in {name}"
            );
        }
    }
}
