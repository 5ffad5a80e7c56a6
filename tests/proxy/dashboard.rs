//! The dashboard (`GET /toolstub/`) against the real server: served
//! without a credential wherever the operator API is, with its strict
//! headers, never forwarded upstream, gone with the operator API; and the
//! stub the read endpoint reports is the one the upstream received.

use super::mock::{client, ok_json, send, Recorded};
use super::{big_json, chat_body, setup_with, KEY};
use serde_json::Value;
use std::sync::Arc;

async fn get(url: String, headers: &[(&str, &str)]) -> (u16, http::HeaderMap, String) {
    let (status, headers, body) = send(&client(), "GET", url, headers, "").await;
    (
        status.as_u16(),
        headers,
        String::from_utf8(body.to_vec()).expect("utf-8"),
    )
}

fn assert_strict_headers(headers: &http::HeaderMap, content_type: &str) {
    assert_eq!(headers["content-type"], content_type);
    let csp = headers["content-security-policy"].to_str().expect("ascii");
    for directive in [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{directive} in {csp}");
    }
    assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"));
    assert_eq!(headers["cache-control"], "no-store");
    assert_eq!(headers["x-content-type-options"], "nosniff");
}

#[tokio::test]
async fn the_page_and_its_files_are_served_without_a_credential() {
    let s = setup_with(
        Arc::new(|_: &Recorded| ok_json("ok")),
        &[("TOOLSTUB_OPERATOR_API_ADMIN_TOKEN", "dash-token")],
    )
    .await;
    // No credential, no admin token: the page holds no data.
    let (status, headers, page) = get(s.url("/toolstub/"), &[]).await;
    assert_eq!(status, 200, "{page}");
    assert_strict_headers(&headers, "text/html; charset=utf-8");
    assert!(page.starts_with("<!doctype html>"));
    assert!(page.contains(r#"<script src="assets/dashboard.js" defer></script>"#));
    assert!(page.contains(r#"id="sign-in-form""#));
    let (status, headers, script) = get(s.url("/toolstub/assets/dashboard.js"), &[]).await;
    assert_eq!(status, 200);
    assert_strict_headers(&headers, "text/javascript; charset=utf-8");
    assert!(script.contains("sessionStorage"));
    assert!(script.contains("x-toolstub-admin-token"));
    let (status, headers, css) = get(s.url("/toolstub/assets/dashboard.css"), &[]).await;
    assert_eq!(status, 200);
    assert_strict_headers(&headers, "text/css; charset=utf-8");
    assert!(css.contains(".card"));
    // The data still needs the admin token.
    let (status, _, _) = get(s.url("/toolstub/v1/results"), &[("authorization", KEY)]).await;
    assert_eq!(status, 401);

    // Without the trailing slash: a redirect to the page.
    let (status, headers, _) = get(s.url("/toolstub"), &[]).await;
    assert_eq!(status, 308);
    assert_eq!(headers["location"], "/toolstub/");
    // HEAD has the headers and no body.
    let (status, headers, body) = send(&client(), "HEAD", s.url("/toolstub/"), &[], "").await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-length"], page.len().to_string().as_str());
    assert!(body.is_empty());
    // Other methods, unknown files: errors, never forwarded.
    let (status, headers, _) = send(&client(), "POST", s.url("/toolstub/"), &[], "x").await;
    assert_eq!(status, 405);
    assert_eq!(headers["allow"], "GET");
    for path in [
        "/toolstub/assets/nope.js",
        "/toolstub/assets/",
        "/toolstub/assets/../v1/results",
    ] {
        let (status, _, body) = get(s.url(path), &[]).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
    assert!(s.mock.requests().is_empty(), "nothing went upstream");
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn the_dashboard_follows_the_operator_api() {
    // With the operator API on its own address: served there only.
    let s = setup_with(
        Arc::new(|_: &Recorded| ok_json("ok")),
        &[("TOOLSTUB_OPERATOR_API_LISTEN", "127.0.0.1:0")],
    )
    .await;
    let operator = s.proxy.operator_addr.expect("a second listener");
    let (status, _, body) = get(s.url("/toolstub/"), &[]).await;
    assert_eq!(status, 404, "{body}");
    let (status, _, _) = get(s.url("/toolstub/assets/dashboard.js"), &[]).await;
    assert_eq!(status, 404);
    let (status, headers, page) = get(format!("http://{operator}/toolstub/"), &[]).await;
    assert_eq!(status, 200);
    assert_strict_headers(&headers, "text/html; charset=utf-8");
    assert!(page.contains("toolstub dashboard"));
    let (status, _, _) = get(
        format!("http://{operator}/toolstub/assets/dashboard.js"),
        &[],
    )
    .await;
    assert_eq!(status, 200);
    assert!(s.mock.requests().is_empty(), "nothing went upstream");
    s.proxy.shutdown().await;

    // With the operator API off: no dashboard either, and nothing forwarded.
    let s = setup_with(
        Arc::new(|_: &Recorded| ok_json("ok")),
        &[("TOOLSTUB_OPERATOR_API_ENABLED", "false")],
    )
    .await;
    for path in ["/toolstub/", "/toolstub/assets/dashboard.js", "/toolstub"] {
        let (status, _, body) = get(s.url(path), &[]).await;
        assert_eq!(status, 404, "{path}: {body}");
        let v: Value = serde_json::from_str(&body).expect("json error");
        assert!(
            v["error"]["message"]
                .as_str()
                .expect("message")
                .contains("disabled"),
            "{body}"
        );
    }
    assert!(s.mock.requests().is_empty(), "nothing went upstream");
    // The proxied API is unaffected.
    let (status, _, _) = send(
        &client(),
        "POST",
        s.url("/v1/chat/completions"),
        &[("authorization", KEY)],
        chat_body(&[big_json(3000)], ""),
    )
    .await;
    assert_eq!(status, 200);
    s.proxy.shutdown().await;
}

/// The stubs in the body the upstream received, by ref (the `ref:` line).
fn stubs_received(body: &[u8]) -> Vec<(String, String)> {
    let v: Value = serde_json::from_slice(body).expect("json");
    v["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["content"].as_str())
        .filter_map(|c| {
            let r = c.lines().find_map(|l| l.strip_prefix("ref: "))?;
            Some((r.to_string(), c.to_string()))
        })
        .collect()
}

async fn stub_reported(s: &super::Setup, r: &str, key: &str) -> (u16, Value) {
    let (status, _, body) = get(
        s.url(&format!("/toolstub/v1/results/{r}?limit=10")),
        &[("authorization", key)],
    )
    .await;
    let v = serde_json::from_str(&body).expect("json");
    (status, v)
}

#[tokio::test]
async fn the_reported_stub_is_the_one_the_upstream_received() {
    let s = setup_with(Arc::new(|_: &Recorded| ok_json("ok")), &[]).await;
    let mut checked = 0;
    // Six outputs under the threshold, over the turn budget together: one
    // stub, reason turn_budget, a smaller preview.
    let outputs: Vec<String> = (0..6)
        .map(|i| format!("line {i}\n{}", "word ".repeat(3_798)))
        .collect();
    // Twelve large outputs sharing the preview budget, and a client tool
    // named like a recall tool (the stubs name the renamed one).
    let large: Vec<String> = (0..12).map(|i| big_json(1000 + 10 * i)).collect();
    let clash = r#","tools":[{"type":"function","function":{"name":"tool_result_read","parameters":{"type":"object"}}}]"#;
    for (body, expect) in [
        (chat_body(&outputs, ""), "reason: turn_budget"),
        (
            chat_body(&large, clash),
            "Use toolstub_tool_result_read with ref=",
        ),
    ] {
        let (status, _, _) = send(
            &client(),
            "POST",
            s.url("/v1/chat/completions"),
            &[("authorization", KEY)],
            body,
        )
        .await;
        assert_eq!(status, 200);
        let received = stubs_received(&s.mock.last().body);
        assert!(!received.is_empty());
        for (r, stub) in received {
            assert!(stub.contains(expect), "{stub}");
            let (status, v) = stub_reported(&s, &r, KEY).await;
            assert_eq!(status, 200, "{v}");
            assert_eq!(v["metadata"]["stub"].as_str(), Some(stub.as_str()), "{r}");
            checked += 1;
        }
    }
    assert_eq!(checked, 13);
    // Another tenant gets a 404, not the stub.
    let first = stubs_received(&s.mock.last().body).remove(0).0;
    let (status, v) = stub_reported(&s, &first, "Bearer sk-someone-else").await;
    assert_eq!(status, 404, "{v}");
    assert!(v.get("metadata").is_none());
    // An output stored by other means than a rewrite: the stub is unknown.
    let text = big_json(2000);
    let tenant = toolstub::store::Tenant::from_credential(KEY);
    let stored = s
        .proxy
        .app
        .store
        .put(
            &tenant,
            vec![toolstub::store::NewOutput {
                session_id: "by-hand".to_string(),
                tool_call_id: Some("call_by_hand".to_string()),
                tool_name: None,
                mime_type: None,
                preview_chars: 100,
                synopsis: toolstub::synopsis::synopsize(&text, Default::default()),
                text: text.into(),
                sha256: None,
                stub: None,
            }],
        )
        .await
        .expect("put");
    let (status, v) = stub_reported(&s, &stored[0].result_ref, KEY).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["metadata"]["stub"].is_null(), "{v}");
    s.proxy.shutdown().await;
}
